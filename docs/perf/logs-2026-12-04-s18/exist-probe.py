import time, tempfile, numpy as np, statistics
from kvfabric.compat.mooncake import MooncakeDistributedStore
import sys
n=int(sys.argv[1]) if len(sys.argv) > 1 else 256; keys=[f"vllm@model@{i:08x}" for i in range(n)]
ms = MooncakeDistributedStore()
assert ms.setup("localhost", "P2PHANDSHAKE", max(64 << 20, 4 * n * 4096), 0, "nvlink", "", "embedded", enable_egm_store_pool=True, driver="sim", socket_dir=tempfile.mkdtemp()) == 0
buf = np.zeros(max(4 << 20, n * 4096), np.uint8); assert ms.register_buffer(buf.ctypes.data, buf.nbytes) == 0
assert ms.batch_put_from(keys, [buf.ctypes.data + i*4096 for i in range(n)], [4096]*n) == [0]*n
st=ms._s(); lib=st._lib; nat=[0.0]
class T:
    def __getattr__(self,k):
        f=getattr(lib,k)
        if k!="kvfabric_batch_exists": return f
        def w(*a):
            t=time.perf_counter(); r=f(*a); nat[0]+=time.perf_counter()-t; return r
        return w
st._lib=T()
for q in (keys, [k+"x" for k in keys]):
    nat[0]=0.0
    v=[]
    for _ in range(50):
        t=time.perf_counter(); r=ms.batch_is_exist(q); v.append(time.perf_counter()-t)
    print(("hit " if q is keys else "miss"), f"{statistics.median(v)*1e6:.0f} us per {n}-key batch_is_exist, {statistics.median(v)*1e9/n:.0f} ns/key; library {nat[0]/50*1e6:.0f} us mean", r[:2])
ms.close()
