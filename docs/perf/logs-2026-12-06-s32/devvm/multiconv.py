import time, sys
sys.path.insert(0, "python")  # run from the repository root
from kvfabric.store import Store
N, T, R = 256, 56, 16384
bases = [0x7f0000000000 + t * (N * R) for t in range(T)]
ptrs = [[b + i * R for b in bases] for i in range(N)]
sizes = [[R] * T for _ in range(N)]
keys = [f"k{i}" for i in range(N)]
def t(f, reps=200):
    v = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); v.append(time.perf_counter() - t0)
    v.sort(); return f"p50 {v[len(v)//2]*1e6:.0f} us (min {v[0]*1e6:.0f}) = {v[len(v)//2]*1e9/(N*T):.1f} ns/buffer"
c = Store._multi_counts(keys, ptrs, sizes)
print("counts", t(lambda: Store._multi_counts(keys, ptrs, sizes)))
print("regions", t(lambda: Store._multi_regions(keys, ptrs, sizes, c)))
