import time, sys
from array import array
sys.path.insert(0, "python")  # run from the repository root
from kvfabric import _native
n = 4096
keys = [f"bench/python/store/gpu0/65536/r{3}/{i}" for i in range(n)]
base = 0x7f0000000000
ptrs = [base + i * 65536 for i in range(n)]
sizes = [65536] * n
def t(f, reps=200):
    best = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); best.append(time.perf_counter() - t0)
    best.sort()
    return f"{best[len(best)//2]*1e6:.1f}us p50 (min {best[0]*1e6:.1f})"
print("list(keys)", t(lambda: list(keys)))
print("packed_keys_arg", t(lambda: _native.packed_keys_arg(keys)))
print("u64_view ptrs", t(lambda: _native.u64_view(ptrs)))
print("u64_view sizes", t(lambda: _native.u64_view(sizes)))
st = array("i", bytes(4*n)); nr = array("Q", bytes(8*n))
print("result arrays alloc", t(lambda: (array("i", bytes(4 * n)), array("Q", bytes(8 * n)))))
print("nread.tolist", t(lambda: nr.tolist()))
print("codes cmp", t(lambda: st.tobytes() == bytes(4*n)))
