"""The facade's batch_get_into on the caller's default stream (0, the
legacy NULL stream, as every Mooncake engine call) against the Store's
_batch_get_flat on a torch side stream, interleaved; and, on stream 0,
the time inside the native kvfabric_batch_get against the whole call.
Every round is verified.

Usage, from the repository root (with KVFABRIC_LIB pointing at
libkvfabric.so): PYTHONPATH=python python3 scripts/facade-stream.py [sim].
Without "sim" it needs torch and a GPU. It is written to find where the
facade's per-key gap beyond its Python work comes from
(docs/perf/store.md, sixth round). It has run on the simulator only: the
session that wrote it had no device time left."""
import sys, time, tempfile
from kvfabric.compat.mooncake import MooncakeDistributedStore

sim = len(sys.argv) > 1 and sys.argv[1] == "sim"
ROUND = (16 << 20) if sim else (256 << 20)
if sim:
    import numpy as np
    src = np.random.default_rng(1).integers(0, 256, ROUND, dtype=np.uint8); dst = np.zeros(ROUND, dtype=np.uint8)
    sp0, dp0 = src.ctypes.data, dst.ctypes.data
    side = 0
    def prep(p): dst[:] = p
    def same(n): return bool(np.array_equal(src[:n], dst[:n]))
    def sync(): pass
else:
    import torch
    torch.cuda.set_device(0)
    src = torch.randint(0, 256, (ROUND,), dtype=torch.uint8, device="cuda"); dst = torch.empty(ROUND, dtype=torch.uint8, device="cuda")
    sp0, dp0 = src.data_ptr(), dst.data_ptr()
    side = torch.cuda.Stream().cuda_stream
    def prep(p): dst.fill_(p); torch.cuda.synchronize()
    def same(n): torch.cuda.synchronize(); return bool(torch.equal(src[:n], dst[:n]))
    def sync(): torch.cuda.synchronize()
ms = MooncakeDistributedStore()
assert ms.setup("localhost", "P2PHANDSHAKE", 2 * ROUND, 0, "nvlink", "", "embedded", enable_egm_store_pool=True,
                driver="sim" if sim else "cuda", device=0, socket_dir=tempfile.mkdtemp(), max_mr_size=ROUND) == 0
for p in (sp0, dp0):
    assert ms.register_buffer(p, ROUND) == 0
s = ms._s()
lib = s._lib
orig = lib.kvfabric_batch_get
native = [0.0]
def timed(*a):
    t = time.perf_counter(); r = orig(*a); native[0] += time.perf_counter() - t; return r
class L:
    def __getattr__(self, k): return getattr(lib, k)
L.kvfabric_batch_get = staticmethod(timed)
s._lib = L()
MK = 4096
for size in (64 << 10, 256 << 10):
    n = ROUND // size
    keys = [f"pystream/{size}/{i}" for i in range(n)]
    for b in range(0, n, MK):
        ks = keys[b:b + MK]
        assert ms.batch_put_from(ks, [sp0 + (b + i) * size for i in range(len(ks))], [size] * len(ks)) == [0] * len(ks)
    plan = [(keys[b:b + MK], [dp0 + (b + i) * size for i in range(len(keys[b:b + MK]))], [size] * len(keys[b:b + MK])) for b in range(0, n, MK)]
    res = {"stream0": [], "side": []}
    nat = []
    for r in range(9):
        mode = "stream0" if r % 2 == 0 else "side"
        prep((0x11 * r + 7) & 0xFF)
        native[0] = 0.0
        t0 = time.perf_counter()
        for ks, dp, sz in plan:
            if mode == "stream0":
                got = ms.batch_get_into(ks, dp, sz)
                assert got == sz, got[:4]
            else:
                codes, nread, _ = s._batch_get_flat(ks, dp, sz, side)
                assert not any(codes), codes[:4]
        if mode == "side":
            sync()
        t = time.perf_counter() - t0
        assert same(n), f"size {size} round {r} ({mode}): bytes differ"
        if r > 0:
            res[mode].append(ROUND / t / 1e9)
            if mode == "stream0":
                nat.append(native[0] / t)
    f = lambda v: ", ".join(f"{x:.1f}" for x in v)
    print(f"size {size >> 10} KiB, {n} keys in batches of <= {MK}: GB/s stream 0 [{f(res['stream0'])}], side stream [{f(res['side'])}]; "
          f"stream 0: share of the call inside kvfabric_batch_get [{', '.join(f'{x:.2f}' for x in nat)}] (all rounds verified)", flush=True)
    ms.remove_all(True)
for p in (sp0, dp0):
    ms.unregister_buffer(p)
assert ms.close() == 0
