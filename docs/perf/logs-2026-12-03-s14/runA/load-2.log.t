mbench start 1796302593.546599738
utilization.gpu [%], pcie.link.gen.current
100 %, 5
mbench end 1796302596.923465043
