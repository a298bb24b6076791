"""Dev VM: building the pointer array of a multi-buffer batch from Python
lists of ints, per way, best of 5 (the facade's _multi_regions uses
fromlist per key)."""
import time
from array import array
from itertools import chain
for N, T in ((4096, 2), (1024, 8), (256, 64), (128, 64), (64, 256)):
    R = 16384; base = 1 << 40
    P = [[base + t * N * R + i * R for t in range(T)] for i in range(N)]
    def tm(f):
        best = 1e9
        for _ in range(5):
            t = time.perf_counter(); f(); best = min(best, time.perf_counter() - t)
        return best * 1e6
    def fromlist():
        a = array("Q")
        for row in P:
            a.fromlist(row)
        return a
    r = {"array(chain)": tm(lambda: array("Q", chain.from_iterable(P))),
         "array(list(chain))": tm(lambda: array("Q", list(chain.from_iterable(P)))),
         "fromlist per key": tm(fromlist)}
    print(f"{N} keys x {T} buffers: " + ", ".join(f"{k} {v:.0f} us ({v * 1e3 / (N * T):.0f} ns a buffer)" for k, v in r.items()))
