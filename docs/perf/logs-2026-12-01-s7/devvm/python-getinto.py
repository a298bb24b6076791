import os, sys, time, tempfile
sys.path.insert(0, "python")
import numpy as np
from kvfabric.compat.mooncake import MooncakeDistributedStore, _keys
import kvfabric.store as st
ms = MooncakeDistributedStore()
sd = tempfile.mkdtemp()
rc = ms.setup("localhost", "P2PHANDSHAKE", 512<<20, 0, "nvlink", "", "embedded", enable_egm_store_pool=True, driver="sim", device=0, socket_dir=sd, max_mr_size=128<<20)
assert rc == 0, rc
size, n = int(sys.argv[1]), 4096
src = np.random.default_rng(1).integers(0,256,size*n,dtype=np.uint8); dst = np.zeros(size*n, dtype=np.uint8)
for a in (src, dst): assert ms.register_buffer(a.ctypes.data, a.nbytes) == 0
sp = [src.ctypes.data + i*size for i in range(n)]; dp = [dst.ctypes.data + i*size for i in range(n)]; sz = [size]*n
s = ms._s()
# time the native call alone by wrapping the lib function
lib = s._lib
orig = lib.kvfabric_batch_get
tn = [0.0]; calls = [0]
def wrapped(*a):
    t = time.perf_counter(); r = orig(*a); tn[0] += time.perf_counter() - t; calls[0] += 1; return r
class L:
    def __getattr__(self, k): return getattr(lib, k)
L.kvfabric_batch_get = staticmethod(wrapped)
s._lib = L()
tot = {"keys":0.0, "flat":0.0, "all":0.0, "check": 0.0}
R = 20
for r in range(R+1):
    keys = [f"bench/py/{size}/r{r}/{i}" for i in range(n)]
    assert all(c == 0 for c in ms.batch_put_from(keys, sp, sz))
    if r == 1: tn[0] = 0.0; calls[0] = 0
    t0 = time.perf_counter(); got = ms.batch_get_into(keys, dp, sz); t1 = time.perf_counter()
    bad = [(k, c) for k, c in zip(keys, got) if c != size]; t2 = time.perf_counter()
    t3 = time.perf_counter(); ks = _keys(keys); t4 = time.perf_counter(); st.Store._flat_args(ks, dp, sz); t5 = time.perf_counter()
    if r > 0:
        tot["all"] += t1-t0; tot["check"] += t2-t1; tot["keys"] += t4-t3; tot["flat"] += t5-t4
    ms.remove_all(True)
print(f"size {size}: per 4096-key batch_get_into: total {tot['all']/R*1e3:.3f} ms; native call {tn[0]/R*1e3:.3f} ms; python around it {(tot['all']-tn[0])/R*1e3:.3f} ms (of which _keys {tot['keys']/R*1e3:.3f}, _flat_args {tot['flat']/R*1e3:.3f}); harness code check {tot['check']/R*1e3:.3f} ms; native calls {calls[0]} in {R} timed rounds")
ms.close()
