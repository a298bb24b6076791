"""The Mooncake facade's batch_put_from_multi_buffers /
batch_get_into_multi_buffers — what vLLM's Mooncake store connector calls:
one key per KV block, its bytes scattered over every layer's K and V cache —
timed per call, against the time inside the library call it makes and
against batch_put_from / batch_get_into of the same bytes in one buffer
per key. Every round is verified byte for byte, the destination poisoned
before each get.

Usage, from the repository root (KVFABRIC_LIB pointing at libkvfabric.so):

    PYTHONPATH=python python3 scripts/multi-buffers.py [--sim] [--layers L]
        [--region BYTES] [--keys N] [--rounds R] [--modes multi,flat]

Layout (as vLLM's paged KV cache, one K and one V tensor per layer): the
source is 2·L tensors of N blocks of BYTES each; key i is block i of
every tensor, 2·L regions. The destination has the same layout in other
tensors. "flat" puts/gets the same N·2·L·BYTES bytes as N objects of
2·L·BYTES, one buffer each (the single-buffer facade path, for
comparison). Prints one line per round and a summary of min / median /
max µs per call and the share of it inside the library call."""
import argparse
import statistics
import sys
import tempfile
import time

from kvfabric.compat.mooncake import MooncakeDistributedStore

ap = argparse.ArgumentParser()
ap.add_argument("--sim", action="store_true")
ap.add_argument("--layers", type=int, default=32)
ap.add_argument("--region", type=int, default=16 << 10)
ap.add_argument("--keys", type=int, default=256)
ap.add_argument("--rounds", type=int, default=8)
ap.add_argument("--modes", default="multi,flat")
ap.add_argument("--no-stream", action="store_true", help="multi-buffer puts as one batch call, never a put stream")
a = ap.parse_args()
if a.no_stream:
    from kvfabric import store as _store

    _store.STREAM_MIN_REGIONS = 1 << 62

L, R, N = a.layers, a.region, a.keys
T = 2 * L  # tensors
per_key = T * R
TOTAL = N * per_key

if a.sim:
    import numpy as np

    src = np.random.default_rng(1).integers(0, 256, TOTAL, dtype=np.uint8)
    dst = np.zeros(TOTAL, dtype=np.uint8)
    sp0, dp0 = src.ctypes.data, dst.ctypes.data

    def refill(r):
        src[:] = np.random.default_rng(r).integers(0, 256, TOTAL, dtype=np.uint8)

    def poison(p):
        dst[:] = p

    def same():
        return bool(np.array_equal(src, dst))

    def first_diff():
        d = np.nonzero(src != dst)[0]
        return int(d[0]) if len(d) else -1

    def sync():
        pass
else:
    import torch

    torch.cuda.set_device(0)
    src = torch.randint(0, 256, (TOTAL,), dtype=torch.uint8, device="cuda")
    dst = torch.empty(TOTAL, dtype=torch.uint8, device="cuda")
    sp0, dp0 = src.data_ptr(), dst.data_ptr()

    def refill(r):
        g = torch.Generator(device="cuda").manual_seed(r)
        src.copy_(torch.randint(0, 256, (TOTAL,), dtype=torch.uint8, device="cuda", generator=g))
        torch.cuda.synchronize()

    def poison(p):
        dst.fill_(p)
        torch.cuda.synchronize()

    def same():
        torch.cuda.synchronize()
        return bool(torch.equal(src, dst))

    def first_diff():
        d = torch.nonzero(src != dst)
        return int(d[0]) if len(d) else -1

    def sync():
        torch.cuda.synchronize()

    def ceiling():
        """The copy engine's GB/s each way between these HBM buffers and
        pinned host memory of the same size: one cudaMemcpy of it all, best
        of 3 after a warm-up (CUDA events)."""
        host = torch.empty(TOTAL, dtype=torch.uint8, pin_memory=True)
        out = []
        for d, s_ in ((host, src), (dst, host)):
            best = 0.0
            for i in range(4):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                d.copy_(s_, non_blocking=True)
                e1.record()
                e1.synchronize()
                if i:
                    best = max(best, TOTAL / (e0.elapsed_time(e1) / 1e3) / 1e9)
            out.append(best)
        del host
        return out

ms = MooncakeDistributedStore()
rc = ms.setup("localhost", "P2PHANDSHAKE", 3 * TOTAL, 0, "nvlink", "", "embedded", enable_egm_store_pool=True,
              driver="sim" if a.sim else "cuda", device=0, socket_dir=tempfile.mkdtemp(), max_mr_size=TOTAL)
assert rc == 0, rc
for p in (sp0, dp0):
    assert ms.register_buffer(p, TOTAL) == 0

# Time inside the library's batch calls (the put stream's calls summed).
s = ms._s()
lib = s._lib
native = [0.0]


class Timed:
    def __getattr__(self, k):
        f = getattr(lib, k)
        if not k.startswith(("kvfabric_batch_put", "kvfabric_batch_get", "kvfabric_put_stream")):
            return f

        def t(*args):
            t0 = time.perf_counter()
            r = f(*args)
            native[0] += time.perf_counter() - t0
            return r
        return t


s._lib = Timed()

# Tensor t, block i starts at base + t·N·R + i·R (tensor-major, as separate
# per-layer caches).
def multi_ptrs(base):
    return [[base + t * N * R + i * R for t in range(T)] for i in range(N)]


sizes_multi = [[R] * T for _ in range(N)]
put_multi, get_multi = multi_ptrs(sp0), multi_ptrs(dp0)
put_flat = [sp0 + i * per_key for i in range(N)]
get_flat = [dp0 + i * per_key for i in range(N)]
sizes_flat = [per_key] * N

ceil = None if a.sim else ceiling()
if ceil:
    print(f"ceiling (pinned host memory, cudaMemcpy of {TOTAL >> 20} MiB): HBM->host {ceil[0]:.1f} GB/s, "
          f"host->HBM {ceil[1]:.1f} GB/s")
res = {}
modes = a.modes.split(",")
for r in range(a.rounds + 1):  # round 0 warms up
    for mode in modes:
        refill(1000 * r + len(mode))
        keys = [f"mb-{mode}-{r}-{i:06d}" for i in range(N)]
        sync()
        native[0] = 0.0
        t0 = time.perf_counter()
        if mode == "multi":
            got = ms.batch_put_from_multi_buffers(keys, put_multi, sizes_multi)
        else:
            got = ms.batch_put_from(keys, put_flat, sizes_flat)
        tp = time.perf_counter() - t0
        np_ = native[0]
        assert got == [0] * N, (mode, r, sorted(set(got)))
        poison(r & 0xFF)
        native[0] = 0.0
        t0 = time.perf_counter()
        if mode == "multi":
            got = ms.batch_get_into_multi_buffers(keys, get_multi, sizes_multi)
        else:
            got = ms.batch_get_into(keys, get_flat, sizes_flat)
        sync()
        tg = time.perf_counter() - t0
        ng = native[0]
        assert got == [per_key] * N, (mode, r, sorted(set(got))[:4])
        if not same():
            sys.exit(f"round {r} mode {mode}: wrong bytes from offset {first_diff()} (poison {r & 0xFF})")
        assert ms.batch_remove(keys) == [0] * N if hasattr(ms, "batch_remove") else True
        gbps_p, gbps_g = TOTAL / tp / 1e9, TOTAL / tg / 1e9
        print(f"round {r} {mode}: put {tp * 1e6:.0f} us (library {np_ * 1e6:.0f}, {gbps_p:.1f} GB/s) "
              f"get {tg * 1e6:.0f} us (library {ng * 1e6:.0f}, {gbps_g:.1f} GB/s) verified", flush=True)
        if r:
            res.setdefault(mode, []).append((tp, np_, tg, ng))

if ceil:
    again = ceiling()
    print(f"ceiling after: HBM->host {again[0]:.1f} GB/s, host->HBM {again[1]:.1f} GB/s (the higher of each pair is used)")
    ceil = [max(x, y) for x, y in zip(ceil, again)]
print(f"layout: {N} keys x {T} regions of {R} B = {TOTAL >> 20} MiB per call; "
      f"{'sim' if a.sim else 'cuda'}; {a.rounds} rounds after a warm-up, all verified")
for mode, rows in res.items():
    for name, ti, ni in (("put", 0, 1), ("get", 2, 3)):
        v = sorted(x[ti] * 1e6 for x in rows)
        w = [(x[ti] - x[ni]) * 1e6 for x in rows]
        med = TOTAL / statistics.median(v) / 1e3
        ratio = f", {med / ceil[0 if name == 'put' else 1]:.3f} of the ceiling" if ceil else ""
        print(f"{mode} {name}: {v[0]:.0f} / {statistics.median(v):.0f} / {v[-1]:.0f} us per call "
              f"(min/median/max); outside the library {min(w):.0f}-{max(w):.0f} us; "
              f"{med:.2f} GB/s at the median{ratio}")
