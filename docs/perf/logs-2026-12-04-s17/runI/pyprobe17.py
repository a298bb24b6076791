#!/usr/bin/env python3
"""Session 17 probe: the python facade's put as a put stream, step by step.

Per size (16 KiB, 64 KiB; 4096 keys per batch, one batch per round) and per
mode, R rounds each, byte-verified after each round:
  facade:  MooncakeDistributedStore.batch_put_from (a stream: the default pieces)
  f256:    the same with the first piece 256 keys (STREAM_FIRST_PIECE)
  m4096:   the same with pieces doubling up to 4096 (STREAM_MAX_PIECE)
  raw:     kvfabric_batch_put_packed with every argument built before the timing
  steps:   the stream's calls made here, timed: begin, each piece's
           conversion and feed, end (µs from the start)
Prints one JSON line per measurement."""
import json, os, sys, time
from array import array
from ctypes import byref, c_int32, c_int64
import torch
from kvfabric import _native
from kvfabric import store as _store
from kvfabric.compat.mooncake import MooncakeDistributedStore

tag = sys.argv[1]
R = int(sys.argv[2]) if len(sys.argv) > 2 else 8
N = 4096
NB = 64 << 10
torch.cuda.set_device(0)
src = torch.empty(N * NB, dtype=torch.uint8, device="cuda")
dst = torch.empty(N * NB, dtype=torch.uint8, device="cuda")
ms = MooncakeDistributedStore()
rc = ms.setup("localhost", "P2PHANDSHAKE", 24 << 30, 0, "nvlink", "", "embedded", enable_egm_store_pool=True,
              driver="cuda", device=0, socket_dir=os.environ.get("SOCKDIR", "/tmp/pyprobe17-sock"), max_mr_size=128 << 20)
assert rc == 0, rc
sp, dp = src.data_ptr(), dst.data_ptr()
for p in (sp, dp):
    assert ms.register_buffer(p, N * NB) == 0
s = ms._s()
lib, h = s._lib, s._handle()
out = lambda **m: print(json.dumps(dict(tag=tag, **m)), flush=True)
defaults = (_store.STREAM_FIRST_PIECE, _store.STREAM_MAX_PIECE)
modes = ("facade", "raw", "steps", "f256", "m4096")
g = 0
for size in (16 << 10, 64 << 10):
    for rnd in range(len(modes) * (R + 1)):
        mode = modes[rnd % len(modes)]
        g += 1
        n = N * size
        src[:n].copy_(torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda"))
        dst[:n].fill_(g & 0xFF)
        torch.cuda.synchronize()
        keys = [f"p17/{tag}/{size}/r{g}/{i}" for i in range(N)]
        sptr = [sp + i * size for i in range(N)]
        dptr = [dp + i * size for i in range(N)]
        sizes = [size] * N
        marks = None
        _store.STREAM_FIRST_PIECE, _store.STREAM_MAX_PIECE = defaults
        if mode == "f256":
            _store.STREAM_FIRST_PIECE = 256
        if mode == "m4096":
            _store.STREAM_MAX_PIECE = 4096
        if mode in ("facade", "f256", "m4096"):
            t0 = time.perf_counter()
            codes = ms.batch_put_from(keys, sptr, sizes)
            t1 = time.perf_counter()
            assert not any(codes), codes[:4]
        elif mode == "raw":
            j = "\0".join(keys).encode()
            pa, sa = _native.u64_view(sptr), _native.u64_view(sizes)
            st = (c_int32 * N)()
            t0 = time.perf_counter()
            rc = lib.kvfabric_batch_put_packed(h, N, j, len(j), pa, sa, None, 0, 0, 0, b"", 0, 0, st)
            t1 = time.perf_counter()
            assert rc == 0 and not any(st), (rc, st[0])
        else:
            pc = time.perf_counter
            t0 = pc()
            sid = c_int64()
            rc = lib.kvfabric_put_stream_begin(h, N, 0, 0, 0, b"", 0, 0, byref(sid))
            assert rc == 0, rc
            marks = [("begin", (pc() - t0) * 1e6)]
            lo, step = 0, defaults[0]
            while lo < N:
                hi = min(N, lo + step)
                ks = keys[lo:hi]
                pa, sa = _native.u64_view(sptr[lo:hi]), _native.u64_view(sizes[lo:hi])
                j = _native.packed_keys_arg(ks)
                c = pc()
                rc = lib.kvfabric_put_stream_feed_packed(h, sid.value, hi - lo, j[0], j[1], pa, sa, None)
                assert rc == 0, rc
                marks.append((f"conv{hi - lo}", (c - t0) * 1e6))
                marks.append((f"feed{hi - lo}", (pc() - t0) * 1e6))
                lo, step = hi, min(2 * step, defaults[1])
            st = array("i", bytes(4 * N))
            rc = lib.kvfabric_put_stream_end(h, sid.value, (c_int32 * N).from_buffer(st))
            t1 = pc()
            assert rc == 0 and st.tolist().count(0) == N
            marks.append(("end", (t1 - t0) * 1e6))
        got = ms.batch_get_into(keys, dptr, sizes)
        assert got.count(size) == N, got[:4]
        torch.cuda.synchronize()
        ok = torch.equal(src[:n], dst[:n])
        ms.remove_all(True)
        if rnd >= len(modes):  # the first pass warms up
            out(kind="put", size=size, mode=mode, put_us=(t1 - t0) * 1e6, put_gbs=n / (t1 - t0) / 1e9, ok=ok, marks=marks)
        assert ok, f"round {g}: bytes differ"
for p in (sp, dp):
    ms.unregister_buffer(p)
assert ms.close() == 0
