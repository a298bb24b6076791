# HEAD's BenchmarkFastSpinCPU for the API before it (FastSpinCounts
# returned hits and misses; no skips).
s/\tst0 := srv.FastSpinCounts()/\th0, m0 := srv.FastSpinCounts()/
s/\tst := srv.FastSpinCounts()/\th1, m1 := srv.FastSpinCounts()/
s/float64(st.Hits-st0.Hits)/float64(h1-h0)/
s/float64(st.Misses-st0.Misses)/float64(m1-m0)/
/master-skips\/call/d
