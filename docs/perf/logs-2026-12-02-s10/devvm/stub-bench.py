#!/usr/bin/env python3
"""Dev VM, simulator: the Python side of one 4096-key batch with the
library's batch functions stubbed out (they return 0 at once), so only
the package's own work is timed. Run with PYTHONPATH at the package to
measure and KVFABRIC_LIB at a libkvfabric.so; argv[1] labels the lines.
Prints the best of 5 × 10 calls, µs per batch: the facade's
batch_get_into / batch_put_from, the native Store.batch_get / batch_put of
(ptr, nbytes) tuples, and the facade's argument building alone."""
import ctypes, sys, time
from kvfabric.compat.mooncake import MooncakeDistributedStore
from kvfabric import _native

label = sys.argv[1]
ms = MooncakeDistributedStore()
assert ms.setup("localhost", "P2PHANDSHAKE", 64 << 20, 0, "nvlink", "", "embedded",
                enable_egm_store_pool=True, driver="sim", device=0, max_mr_size=16 << 20) == 0
s = ms._s()
R = 16 << 20
buf = bytearray(R)
base = ctypes.addressof((ctypes.c_char * R).from_buffer(buf))
s.register_buffer(base, R)


class Stub:
    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, n):
        if n.startswith("kvfabric_batch_"):
            return lambda *a: 0
        return getattr(self._lib, n)


s._lib = Stub(s._lib)
n = 4096
keys = [f"bench/python/embedded/gpu0/65536/r3/{i}" for i in range(n)]
ptrs = [base + (i % 256) * 4096 for i in range(n)]
sizes = [4096] * n
outs = list(zip(ptrs, sizes))


def t(name, f):
    best = 1e9
    for _ in range(5):
        st = time.perf_counter()
        for _ in range(10):
            f()
        best = min(best, (time.perf_counter() - st) / 10 * 1e6)
    print(f"{label} {name:24s} {best:9.1f} us/batch of {n}")


def marshal():
    if hasattr(s, "_flat_args"):  # before packed keys
        from kvfabric.compat.mooncake import _keys
        s._flat_args(_keys(keys), ptrs, sizes)
    else:
        _native.joined_keys(keys)
        s._flat_regions(keys, ptrs, sizes)


t("facade batch_get_into", lambda: ms.batch_get_into(keys, ptrs, sizes))
t("facade batch_put_from", lambda: ms.batch_put_from(keys, ptrs, sizes))
t("native batch_get tuples", lambda: s.batch_get(keys, outs))
t("native batch_put tuples", lambda: s.batch_put(keys, outs))
t("facade arguments", marshal)
