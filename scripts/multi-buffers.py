"""The Mooncake facade's batch_put_from_multi_buffers /
batch_get_into_multi_buffers — what vLLM's Mooncake store connector calls:
one key per KV block, its bytes scattered over every layer's K and V cache —
timed per call, against the time inside the library call it makes and
against batch_put_from / batch_get_into of the same bytes in one buffer
per key, with the Store's phase split (Store.phases) per key. Every round is verified byte for byte, the destination poisoned
before each get.

Usage, from the repository root (KVFABRIC_LIB pointing at libkvfabric.so):

    PYTHONPATH=python python3 scripts/multi-buffers.py [--sim] [--layers L]
        [--region BYTES] [--keys N] [--rounds R] [--modes multi,flat]
        [--one-buffer] [--master HOST:PORT]

Layout (as vLLM's paged KV cache, one K and one V tensor per layer): the
source is 2·L tensors of N blocks of BYTES each, each registered with
register_buffer (--one-buffer: slices of one registered buffer); key i is
block i of every tensor, 2·L regions. The destination has the same layout
in other tensors. "flat" puts/gets the same N·2·L·BYTES bytes as N objects of
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
ap.add_argument("--one-buffer", action="store_true", help="the layer tensors in one registered buffer")
ap.add_argument("--master", default="embedded", help="master_server_addr: embedded, or HOST:PORT of a kvfabric master")
a = ap.parse_args()

L, R, N = a.layers, a.region, a.keys
T = 2 * L  # tensors
per_key = T * R
TOTAL = N * per_key

# Buffers: the layer tensors (2·L of N·R bytes each, src and dst, each
# registered on its own as vLLM registers its KV cache tensors, or with
# --one-buffer carved from one registered buffer) and, for "flat", one
# contiguous src and dst of TOTAL bytes.
if a.sim:
    import numpy as np

    def alloc(n):
        return np.zeros(n, dtype=np.uint8)

    def ptr(x):
        return x.ctypes.data

    def refill(bufs, r):
        rng = np.random.default_rng(r)
        for b in bufs:
            b[:] = rng.integers(0, 256, len(b), dtype=np.uint8)

    def poison(bufs, p):
        for b in bufs:
            b[:] = p

    def first_diff(xs, ys):
        for t, (x, y) in enumerate(zip(xs, ys)):
            d = np.nonzero(x != y)[0]
            if len(d):
                return t, int(d[0])
        return None

    def sync():
        pass
else:
    import torch

    torch.cuda.set_device(0)

    def alloc(n):
        return torch.empty(n, dtype=torch.uint8, device="cuda")

    def ptr(x):
        return x.data_ptr()

    def refill(bufs, r):
        g = torch.Generator(device="cuda").manual_seed(r)
        for b in bufs:
            b.copy_(torch.randint(0, 256, (len(b),), dtype=torch.uint8, device="cuda", generator=g))
        torch.cuda.synchronize()

    def poison(bufs, p):
        for b in bufs:
            b.fill_(p)
        torch.cuda.synchronize()

    def first_diff(xs, ys):
        torch.cuda.synchronize()
        for t, (x, y) in enumerate(zip(xs, ys)):
            if not torch.equal(x, y):
                return t, int(torch.nonzero(x != y)[0])
        return None

    def sync():
        torch.cuda.synchronize()

    def ceiling():
        """The copy engine's GB/s each way between an HBM buffer and pinned
        host memory of TOTAL bytes: one cudaMemcpy of it all, best of 3
        after a warm-up (CUDA events)."""
        host = torch.empty(TOTAL, dtype=torch.uint8, pin_memory=True)
        dev = alloc(TOTAL)
        out = []
        for d, s_ in ((host, dev), (dev, host)):
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
        del host, dev
        return out

if a.one_buffer:
    whole_src, whole_dst = alloc(TOTAL), alloc(TOTAL)
    src_t = [whole_src[t * N * R: (t + 1) * N * R] for t in range(T)]
    dst_t = [whole_dst[t * N * R: (t + 1) * N * R] for t in range(T)]
    regs = [whole_src, whole_dst]
else:
    src_t = [alloc(N * R) for _ in range(T)]
    dst_t = [alloc(N * R) for _ in range(T)]
    regs = src_t + dst_t
flat_src, flat_dst = alloc(TOTAL), alloc(TOTAL)
regs += [flat_src, flat_dst]

ms = MooncakeDistributedStore()
rc = ms.setup("localhost", "P2PHANDSHAKE", 3 * TOTAL, 0, "nvlink", "", a.master, enable_egm_store_pool=True,
              driver="sim" if a.sim else "cuda", device=0, socket_dir=tempfile.mkdtemp(), max_mr_size=TOTAL)
assert rc == 0, rc
for b in regs:
    assert ms.register_buffer(ptr(b), len(b)) == 0

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

# Key i is block i of every tensor, in tensor order.
def multi_ptrs(ts):
    bases = [ptr(t) for t in ts]
    return [[b + i * R for b in bases] for i in range(N)]


sizes_multi = [[R] * T for _ in range(N)]
put_multi, get_multi = multi_ptrs(src_t), multi_ptrs(dst_t)
put_flat = [ptr(flat_src) + i * per_key for i in range(N)]
get_flat = [ptr(flat_dst) + i * per_key for i in range(N)]
sizes_flat = [per_key] * N

ceil = None if a.sim else ceiling()
if ceil:
    print(f"ceiling (pinned host memory, cudaMemcpy of {TOTAL >> 20} MiB): HBM->host {ceil[0]:.1f} GB/s, "
          f"host->HBM {ceil[1]:.1f} GB/s")
res = {}
phases = {}  # mode -> put/get -> the Store's phase sums over the timed rounds (Store.phases)
modes = a.modes.split(",")
for r in range(a.rounds + 1):  # round 0 warms up
    for mode in modes:
        srcs, dsts = (src_t, dst_t) if mode == "multi" else ([flat_src], [flat_dst])
        refill(srcs, 1000 * r + len(mode))
        keys = [f"mb-{mode}-{r}-{i:06d}" for i in range(N)]
        sync()
        native[0] = 0.0
        ph0 = s.phases()
        t0 = time.perf_counter()
        if mode == "multi":
            got = ms.batch_put_from_multi_buffers(keys, put_multi, sizes_multi)
        else:
            got = ms.batch_put_from(keys, put_flat, sizes_flat)
        tp = time.perf_counter() - t0
        np_ = native[0]
        assert got == [0] * N, (mode, r, sorted(set(got)))
        poison(dsts, r & 0xFF)
        native[0] = 0.0
        t0 = time.perf_counter()
        if mode == "multi":
            got = ms.batch_get_into_multi_buffers(keys, get_multi, sizes_multi)
        else:
            got = ms.batch_get_into(keys, get_flat, sizes_flat)
        sync()
        tg = time.perf_counter() - t0
        ng = native[0]
        ph1 = s.phases()
        assert got == [per_key] * N, (mode, r, sorted(set(got))[:4])
        bad = first_diff(srcs, dsts)
        if bad is not None:
            sys.exit(f"round {r} mode {mode}: wrong bytes in buffer {bad[0]} from offset {bad[1]} (poison {r & 0xFF})")
        assert ms.batch_remove(keys) == [0] * N
        gbps_p, gbps_g = TOTAL / tp / 1e9, TOTAL / tg / 1e9
        print(f"round {r} {mode}: put {tp * 1e6:.0f} us (library {np_ * 1e6:.0f}, {gbps_p:.1f} GB/s) "
              f"get {tg * 1e6:.0f} us (library {ng * 1e6:.0f}, {gbps_g:.1f} GB/s) verified", flush=True)
        if r:
            res.setdefault(mode, []).append((tp, np_, tg, ng))
            acc = phases.setdefault(mode, {k: {n: 0.0 for n in s._PHASES} for k in ("put", "get")})
            for k in acc:
                for n in s._PHASES:
                    acc[k][n] += ph1[k][n] - ph0[k][n]

if ceil:
    again = ceiling()
    print(f"ceiling after: HBM->host {again[0]:.1f} GB/s, host->HBM {again[1]:.1f} GB/s (the higher of each pair is used)")
    ceil = [max(x, y) for x, y in zip(ceil, again)]
print(f"layout: {N} keys x {T} regions of {R} B = {TOTAL >> 20} MiB per call; "
      f"{'one registered buffer' if a.one_buffer else 'one registered buffer per tensor'}; "
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
for mode, acc in phases.items():
    for kind, ph in acc.items():
        k = max(ph["keys"], 1)
        split = " ".join(f"{n} {ph[n] / k * 1e6:.2f}" for n in s._PHASES[2:])
        print(f"{mode} {kind} phases, us per key ({int(ph['keys'])} keys, {int(ph['calls'])} calls): {split}")
