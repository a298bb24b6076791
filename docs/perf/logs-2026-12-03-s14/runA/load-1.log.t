mbench start 1796302578.671477521
utilization.gpu [%], pcie.link.gen.current
100 %, 5
mbench end 1796302582.136902904
