#!/usr/bin/env python3
"""Where the python path's time goes per batch: marshal, the C call with
prebuilt arguments, and the facade call, for put and get, every round
verified. argv[1]: label. Prints one line per (size, op, part) with the
min / median over rounds in microseconds per batch."""
import os, sys, time, statistics
from array import array
from ctypes import c_int32, c_uint64
SIM = len(sys.argv) > 2 and sys.argv[2] == "sim"
if not SIM:
    import torch
else:
    import os, ctypes
from kvfabric import _native
from kvfabric.compat.mooncake import MooncakeDistributedStore

label = sys.argv[1]
R = (256 if not SIM else 16) << 20
if SIM:
    src = bytearray(R); dst = bytearray(R)
    sp = ctypes.addressof((ctypes.c_char * R).from_buffer(src)); dp = ctypes.addressof((ctypes.c_char * R).from_buffer(dst))
else:
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    src = torch.empty(R, dtype=torch.uint8, device=dev)
    dst = torch.empty(R, dtype=torch.uint8, device=dev)
    sp, dp = src.data_ptr(), dst.data_ptr()
def sync():
    if not SIM: torch.cuda.synchronize()
def fresh(m, b):
    if SIM:
        src[:m] = os.urandom(m); dst[:m] = bytes([b]) * m
    else:
        src[:m].copy_(torch.randint(0, 256, (m,), dtype=torch.uint8, device=dev)); dst[:m].fill_(b)
def same(m):
    return src[:m] == dst[:m] if SIM else torch.equal(src[:m], dst[:m])
ms = MooncakeDistributedStore()
rc = ms.setup("localhost", "P2PHANDSHAKE", (24 << 30) if not SIM else (64 << 20), 0, "nvlink", "", "embedded",
              enable_egm_store_pool=True, driver="sim" if SIM else "cuda", device=0, max_mr_size=(128 if not SIM else 16) << 20)
assert rc == 0, rc
for p in (sp, dp):
    assert ms.register_buffer(p, R) == 0
s = ms._s()
lib = s._lib
res = {}
def rec(k, v): res.setdefault(k, []).append(v * 1e6)
g = 0
for size in (4096, 16384, 65536, 262144, 1 << 20):
    n = min(4096, R // size)
    for rnd in range(8):
        g += 1
        fresh(n * size, g & 0xFF)
        sync()
        keys = [f"probe/{label}/{size}/r{g}/{i}" for i in range(n)]
        spl = [sp + i * size for i in range(n)]
        dpl = [dp + i * size for i in range(n)]
        szl = [size] * n
        t0 = time.perf_counter()
        j = _native.joined_keys(keys)
        pa, sa, ca = s._flat_regions(keys, spl, szl)
        rec((size, "marshal"), time.perf_counter() - t0)
        h = s._handle()
        st = array("i", bytes(4 * n))
        if rnd % 2 == int(os.environ.get("PROBE_SWAP","0")):
            # the C call alone, arguments built beforehand
            t0 = time.perf_counter()
            rc = lib.kvfabric_batch_put_packed(h, n, j, len(j), pa, sa, ca, 0, 0, 0, b"", 0, 0, (c_int32 * n).from_buffer(st))
            rec((size, "put-call"), time.perf_counter() - t0)
            assert rc >= 0 and not any(st), (rc, st[:4])
            dpa, _, _ = s._flat_regions(keys, dpl, szl)
            nr = array("Q", bytes(8 * n))
            t0 = time.perf_counter()
            rc = lib.kvfabric_batch_get_packed(h, n, j, len(j), dpa, sa, ca, 0, (c_uint64 * n).from_buffer(nr), (c_int32 * n).from_buffer(st))
            rec((size, "get-call"), time.perf_counter() - t0)
            assert rc >= 0 and not any(st), (rc, st[:4], _native.last_error(h))
        else:
            t0 = time.perf_counter()
            codes = ms.batch_put_from(keys, spl, szl)
            rec((size, "put-facade"), time.perf_counter() - t0)
            assert not any(codes), codes[:4]
            t0 = time.perf_counter()
            got = ms.batch_get_into(keys, dpl, szl)
            rec((size, "get-facade"), time.perf_counter() - t0)
            assert all(x == size for x in got), got[:4]
        sync()
        assert same(n * size), f"verify size {size} round {rnd}"
        ms.remove_all(True)
for (size, part), v in sorted(res.items()):
    v = v[1:] if len(v) > 2 else v  # the first of each is a warm-up
    n = min(4096, R // size)
    print(f"{label} size={size} keys={n} {part:11s} min {min(v):9.1f} med {statistics.median(v):9.1f} us/batch  ({statistics.median(v)/n:.3f} us/key)")
for p in (sp, dp):
    ms.unregister_buffer(p)
assert ms.close() == 0
