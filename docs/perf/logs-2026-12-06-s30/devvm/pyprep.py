# What the Python facade builds before a 4096-key batch get's native call
# (Store._batch_get_flat): the pointer and size arrays (u64_view), the
# packed keys, the result arrays and the sizes list back. Dev VM, no GPU.
# Usage from the repository root: PYTHONPATH=python python3 docs/perf/logs-2026-12-06-s30/devvm/pyprep.py
import array, time
from kvfabric import _native
n = 4096
keys = [f"bench/python/1gpu/gpu0/65536/r1/{i}" for i in range(n)]
ptrs = [0x7f0000000000 + i * 65536 for i in range(n)]
sizes = [65536] * n
def per_call_us(f, reps=200):
    f()
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t0) / reps * 1e6
for rep in range(3):
    print(f"round {rep + 1}: u64_view(ptrs)+u64_view(sizes) {per_call_us(lambda: (_native.u64_view(ptrs), _native.u64_view(sizes))):.1f} us;"
          f" packed_keys_arg {per_call_us(lambda: _native.packed_keys_arg(keys)):.1f} us;"
          f" result arrays {per_call_us(lambda: (array.array('i', bytes(4 * n)), array.array('Q', bytes(8 * n)))):.1f} us;"
          f" nread.tolist {per_call_us(lambda: array.array('Q', bytes(8 * n)).tolist()):.1f} us")
