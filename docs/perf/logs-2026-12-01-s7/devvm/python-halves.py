# Times the facade's batch_get_into of 4096 keys (simulator, embedded master).
import sys, time, tempfile
import numpy as np
from kvfabric.compat.mooncake import MooncakeDistributedStore
size, n, R = int(sys.argv[1]), 4096, 20
ms = MooncakeDistributedStore()
assert ms.setup("localhost", "P2PHANDSHAKE", 512 << 20, 0, "nvlink", "", "embedded", enable_egm_store_pool=True,
                driver="sim", device=0, socket_dir=tempfile.mkdtemp(), max_mr_size=128 << 20) == 0
src = np.random.default_rng(1).integers(0, 256, size * n, dtype=np.uint8); dst = np.zeros(size * n, dtype=np.uint8)
for a in (src, dst):
    assert ms.register_buffer(a.ctypes.data, a.nbytes) == 0
sp = [src.ctypes.data + i * size for i in range(n)]; dp = [dst.ctypes.data + i * size for i in range(n)]; sz = [size] * n
ts = []
for r in range(R + 1):
    keys = [f"bench/py/{size}/r{r}/{i}" for i in range(n)]
    assert all(c == 0 for c in ms.batch_put_from(keys, sp, sz))
    dst[:] = 0
    t0 = time.perf_counter(); got = ms.batch_get_into(keys, dp, sz); t1 = time.perf_counter()
    assert got == sz and np.array_equal(src, dst)
    if r > 0:
        ts.append(t1 - t0)
    ms.remove_all(True)
ts.sort()
print(f"{sys.argv[2]} size {size}: batch_get_into of {n} keys: median {ts[len(ts)//2]*1e3:.3f} ms, min {ts[0]*1e3:.3f}, max {ts[-1]*1e3:.3f} ({R} rounds, verified)")
ms.close()
