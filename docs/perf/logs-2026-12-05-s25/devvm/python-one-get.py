# Dev VM (sim): the Python pieces of one 4 KiB get, best of 5 x 20000 calls each.
# Run from the repository root: KVFABRIC_LIB=build/libkvfabric.so python3 docs/perf/logs-2026-12-05-s25/devvm/python-one-get.py
import ctypes, os, sys, tempfile, time, timeit
sys.path.insert(0, "python")
import kvfabric
from kvfabric import _native, store as st
from kvfabric.compat import mooncake as mc
cfg = {"driver": "sim", "protocol": "nvlink", "master_server_addr": "embedded", "enable_egm_store_pool": True,
       "global_segment_size": "64MiB", "local_buffer_size": 0, "local_hostname": "x", "socket_dir": tempfile.mkdtemp()}
s = kvfabric.Store(cfg)
SIZE=4096
buf = ctypes.create_string_buffer(SIZE); ptr = ctypes.addressof(buf)
s.register_buffer(ptr, SIZE)
s.put("k", (ptr, SIZE))
k=b"k"; h=s._h; lib=s._lib
ptrs, lens, n = _native.u64_array([ptr]), _native.u64_array([SIZE]), ctypes.c_uint64(0)
N=20000
def t(name, f):
    f()
    best=min(timeit.repeat(f, number=N, repeat=5))/N*1e6
    print(f"{name:30s} {best:.2f} us")
t("native get", lambda: lib.kvfabric_get(h, k, 1, ptrs, lens, 1, 0, ctypes.byref(n)))
t("Store.get", lambda: s.get("k", (ptr, SIZE)))
t("_parts", lambda: st._parts((ptr, SIZE), True))
bufs = st._parts((ptr, SIZE), True)
t("_direct all", lambda: all(s._direct(b) for b in bufs))
t("u64_array x2", lambda: (_native.u64_array([ptr]), _native.u64_array([SIZE])))
t("byref+c_uint64", lambda: ctypes.byref(ctypes.c_uint64(0)))
t("_stream_handle", lambda: st._stream_handle(None))
t("next stream", lambda: next((b.stream for b in bufs if b.stream is not None), 0))
t("exists", lambda: s.exists("k"))
from ctypes import c_uint64, byref
fn = lib.kvfabric_get
def fast_get(key, out):
    if type(out) is tuple and len(out) == 2:
        p, nb = out
        if type(p) is int and type(nb) is int and p >= 0 and nb >= 0:
            kk = key.encode() if type(key) is str else key
            n = c_uint64(0)
            rc = fn(h, kk, len(kk), byref(c_uint64(p)), byref(c_uint64(nb)), 1, 0, byref(n))
            return rc, n.value
t("fast_get", lambda: fast_get("k", (ptr, SIZE)))
t("bare fn call prebuilt", lambda: fn(h, k, 1, ptrs, lens, 1, 0, byref(n)))
t("lib attr lookup", lambda: lib.kvfabric_get)
P=c_uint64(ptr); L=c_uint64(SIZE)
t("fn call byref prebuilt", lambda: fn(h, k, 1, byref(P), byref(L), 1, 0, byref(n)))
t("exists native", lambda: lib.kvfabric_exists(h, k, 1) if hasattr(lib, "kvfabric_exists") else 0)
m = mc.MooncakeDistributedStore() if hasattr(mc, "MooncakeDistributedStore") else None
from kvfabric.compat.mooncake import MooncakeDistributedStore
m = MooncakeDistributedStore(); m._store = s
t("facade get_into", lambda: m.get_into("k", ptr, SIZE))
