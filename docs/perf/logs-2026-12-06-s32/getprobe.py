#!/usr/bin/env python3
"""Session 32 probe: where a 4096-key batch get's time goes from Python.

One embedded-master Store through the Mooncake facade on GPU 0 (EGM pool),
4096 objects of SIZE bytes put from a torch CUDA tensor, then ROUNDS
rounds, each timing in turn (order rotated per round):
  facade  ms.batch_get_into(keys, ptrs, sizes)            (what the bench times)
  flat    Store._batch_get_flat without the stream         (the facade's call minus its list handling)
  stream  Store._batch_get_stream (get stream, pieces of GET_STREAM_PIECE)
  ccall   kvfabric_batch_get_packed with every argument built before the clock
Every call's destination is poisoned first and compared after (torch.equal).
Prints per variant the p50, min and max milliseconds per call.
"""
import ctypes
import os
import statistics
import sys
import tempfile
import time
from array import array

DRIVER = os.environ.get("PROBE_DRIVER", "cuda")  # "sim": numpy host arrays on the simulator (a dry run)
if DRIVER == "cuda":
    import torch
else:
    import numpy as np

from kvfabric import _native
from kvfabric import store as _store
from kvfabric.compat.mooncake import MooncakeDistributedStore

SIZE = int(os.environ.get("PROBE_SIZE", 65536))
N = 4096
ROUNDS = int(os.environ.get("PROBE_ROUNDS", 20))

nb = N * SIZE
if DRIVER == "cuda":
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    src = torch.randint(0, 256, (nb,), dtype=torch.uint8, device=dev)
    dst = torch.empty(nb, dtype=torch.uint8, device=dev)
    addr, sync, same = (lambda t: t.data_ptr()), torch.cuda.synchronize, torch.equal
else:
    src = np.random.default_rng(1).integers(0, 256, nb, dtype=np.uint8)
    dst = np.empty(nb, dtype=np.uint8)
    addr, sync, same = (lambda a: a.ctypes.data), (lambda: None), np.array_equal
gran = 1 << 30
cap = max(2 * gran, (2 * nb + 2 * gran - 1) // (2 * gran) * (2 * gran))
ms = MooncakeDistributedStore()
sock = tempfile.mkdtemp(prefix="kvf-probe-")
rc = ms.setup("localhost", "P2PHANDSHAKE", cap, 0, "nvlink", "", "embedded", enable_egm_store_pool=True,
              driver=DRIVER, device=0, socket_dir=sock, max_mr_size=cap // 2)
assert rc == 0, rc
for p in (addr(src), addr(dst)):
    assert ms.register_buffer(p, nb) == 0
keys = [f"probe/{SIZE}/{i}" for i in range(N)]
sp = [addr(src) + i * SIZE for i in range(N)]
dp = [addr(dst) + i * SIZE for i in range(N)]
sz = [SIZE] * N
assert ms.batch_put_from(keys, sp, sz) == [0] * N
st = ms._s()
lib = st._lib
h = st._handle()

pa, sa = _native.u64_view(dp), _native.u64_view(sz)
j = _native.packed_keys_arg(keys)
cst = array("i", bytes(4 * N))
cnr = array("Q", bytes(8 * N))
cst_p = (ctypes.c_int32 * N).from_buffer(cst)
cnr_p = (ctypes.c_uint64 * N).from_buffer(cnr)


def facade():
    got = ms.batch_get_into(keys, dp, sz)
    assert got.count(SIZE) == N, got[:4]


def flat():
    codes, nread, _ = nostream(keys, dp, sz)
    assert codes == [0] * N


def nostream(k, p, s):
    old = _store.STREAM_MIN_KEYS
    _store.STREAM_MIN_KEYS = 1 << 30
    try:
        return st._batch_get_flat(k, p, s)
    finally:
        _store.STREAM_MIN_KEYS = old


def stream():
    codes, nread, _ = st._batch_get_stream(keys, dp, sz, 0)
    assert codes == [0] * N


def ccall():
    rc = lib.kvfabric_batch_get_packed(h, N, j[0], j[1], pa, sa, None, 0, cnr_p, cst_p)
    assert rc == 0 and cst.tobytes() == bytes(4 * N), rc


variants = {"facade": facade, "flat": flat, "ccall": ccall}
if hasattr(st, "_batch_get_stream") and getattr(lib, "kvfabric_get_stream_begin", None) is not None:
    variants["stream"] = stream
times = {k: [] for k in variants}
names = list(variants)
for r in range(ROUNDS + 1):
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
        dst[:] = (r * 7 + 3) & 0xFF
        sync()
        t0 = time.perf_counter()
        variants[name]()
        dt = time.perf_counter() - t0
        if not same(src, dst):
            sys.exit(f"round {r} {name}: the gotten bytes differ")
        if r > 0:  # round 0 warms up
            times[name].append(dt * 1e3)
print(f"size {SIZE} keys {N} rounds {ROUNDS} (every call byte-verified)")
for name in names:
    t = times[name]
    print(f"{name:7s} p50 {statistics.median(t):.3f} ms  min {min(t):.3f}  max {max(t):.3f}")
ms.remove_all(True)
for p in (addr(src), addr(dst)):
    ms.unregister_buffer(p)
assert ms.close() == 0
