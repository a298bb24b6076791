#!/usr/bin/env python3
"""Session 15 probe: where the python facade's batch time goes.

Per size (16 KiB, 64 KiB; 4096 keys per batch, one batch per round) and
per mode, R rounds, each byte-verified:
  facade: MooncakeDistributedStore.batch_put_from / batch_get_into (lists)
  raw:    the library's kvfabric_batch_{put,get}_packed with every argument
          (joined keys, u64 arrays) built before the timing
plus the Python-side conversions alone (join, u64_view x2, result lists),
and small batches (1 and 16 keys, 64 KiB) per call latency, facade.
Prints one JSON line per measurement."""
import json, sys, time, os, resource
from array import array
from ctypes import c_int32, c_uint64
SIM = os.environ.get("PROBE_SIM") == "1"
if SIM:
    import numpy as np
else:
    import torch
from kvfabric import _native
from kvfabric.compat.mooncake import MooncakeDistributedStore

tag = sys.argv[1]
R = int(sys.argv[2]) if len(sys.argv) > 2 else 8
dev = 0
N = 4096
NB = 64 << 10
if SIM:
    src = np.empty(N * NB, dtype=np.uint8)
    dst = np.empty(N * NB, dtype=np.uint8)
    rng = np.random.default_rng(1)
else:
    torch.cuda.set_device(dev)
    src = torch.empty(N * NB, dtype=torch.uint8, device="cuda")
    dst = torch.empty(N * NB, dtype=torch.uint8, device="cuda")


def fresh(n, b):
    if SIM:
        src[:n] = rng.integers(0, 256, n, dtype=np.uint8)
        dst[:n] = b
        return
    src[:n].copy_(torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda"))
    dst[:n].fill_(b)
    torch.cuda.synchronize()


def same(n):
    if SIM:
        return bool(np.array_equal(src[:n], dst[:n]))
    torch.cuda.synchronize()
    return torch.equal(src[:n], dst[:n])

ms = MooncakeDistributedStore()
rc = ms.setup("localhost", "P2PHANDSHAKE", (2 << 30) if SIM else (24 << 30), 0, "nvlink", "", "embedded",
              enable_egm_store_pool=True, driver="sim" if SIM else "cuda", device=dev,
              socket_dir=os.environ.get("SOCKDIR", "/tmp/pyprobe-sock"), max_mr_size=128 << 20)
assert rc == 0, rc
sp, dp = (src.ctypes.data, dst.ctypes.data) if SIM else (src.data_ptr(), dst.data_ptr())
for p in (sp, dp):
    assert ms.register_buffer(p, N * NB) == 0
s = ms._s()
try:
    from kvfabric.store import _codes as s_codes
except ImportError:  # the old package
    s_codes = lambda st: st.tolist()
lib = s._lib
h = s._handle()
out = lambda **m: print(json.dumps(dict(tag=tag, **m)), flush=True)
print("affinity", len(os.sched_getaffinity(0)), file=sys.stderr)
g = 0
for size in (16 << 10, 64 << 10):
    for rnd in range(3 * R + 3):
        mode = ("facade", "raw", "steps")[rnd % 3]
        g += 1
        n = N * size
        fresh(n, g & 0xFF)
        keys = [f"probe/{tag}/{size}/r{g}/{i}" for i in range(N)]
        sptr = [sp + i * size for i in range(N)]
        dptr = [dp + i * size for i in range(N)]
        sizes = [size] * N
        steps = None
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        if mode == "facade":
            t0 = time.perf_counter()
            codes = ms.batch_put_from(keys, sptr, sizes)
            t1 = time.perf_counter()
            f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            assert not any(codes), codes[:4]
            t2 = time.perf_counter()
            got = ms.batch_get_into(keys, dptr, sizes)
            t3 = time.perf_counter()
            assert got.count(size) == N, got[:4]
        elif mode == "steps":  # the facade's put and get, step by step
            pc = time.perf_counter
            t0 = pc()
            ks = list(keys)
            a = pc()
            pa, sa = _native.u64_view(sptr), _native.u64_view(sizes)
            b = pc()
            j = _native.packed_keys_arg(ks)
            c = pc()
            st = array("i", bytes(4 * N))
            rc = lib.kvfabric_batch_put_packed(h, N, j[0], j[1], pa, sa, None, 0, 1, 0, b"", 0, 0, (c_int32 * N).from_buffer(st))
            d = pc()
            codes = s_codes(st)
            ok_ = codes.count(0) == N
            t1 = pc()
            f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            assert rc == 0 and ok_
            t2 = pc()
            da = _native.u64_view(dptr)
            sa2 = _native.u64_view(sizes)
            j2 = _native.packed_keys_arg(ks)
            e = pc()
            st = array("i", bytes(4 * N))
            nr = array("Q", bytes(8 * N))
            rc = lib.kvfabric_batch_get_packed(h, N, j2[0], j2[1], da, sa2, None, 0, (c_uint64 * N).from_buffer(nr), (c_int32 * N).from_buffer(st))
            f_ = pc()
            got = nr.tolist()
            codes = s_codes(st)
            t3 = pc()
            assert rc == 0 and codes.count(0) == N and got.count(size) == N
            steps = dict(list=(a - t0) * 1e6, u64=(b - a) * 1e6, keys=(c - b) * 1e6, put_call=(d - c) * 1e6,
                         put_codes=(t1 - d) * 1e6, get_args=(e - t2) * 1e6, get_call=(f_ - e) * 1e6, get_lists=(t3 - f_) * 1e6)
        else:
            j = "\0".join(keys).encode()
            pa, da, sa = _native.u64_view(sptr), _native.u64_view(dptr), _native.u64_view(sizes)
            st = (c_int32 * N)()
            nr = (c_uint64 * N)()
            t0 = time.perf_counter()
            rc = lib.kvfabric_batch_put_packed(h, N, j, len(j), pa, sa, None, 0, 1, 0, b"", 0, 0, st)
            t1 = time.perf_counter()
            f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            assert rc == 0 and not any(st), (rc, st[0])
            t2 = time.perf_counter()
            rc = lib.kvfabric_batch_get_packed(h, N, j, len(j), da, sa, None, 0, nr, st)
            t3 = time.perf_counter()
            assert rc == 0 and not any(st) and nr[0] == size, (rc, st[0])
        f3 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        ok = same(n)
        ms.remove_all(True)
        if rnd >= 2:  # the first two rounds warm up
            out(kind="batch", size=size, mode=mode, put_us=(t1 - t0) * 1e6, get_us=(t3 - t2) * 1e6,
                put_gbs=n / (t1 - t0) / 1e9, get_gbs=n / (t3 - t2) / 1e9, ok=ok,
                put_faults=f1 - f0, get_faults=f3 - f1, steps=steps)
        assert ok, f"round {g}: bytes differ"
# Python-side conversions alone, 4096 keys
keys = [f"probe/{tag}/conv/{i}" for i in range(N)]
ptrs = [sp + i * NB for i in range(N)]
sizes = [NB] * N
def tm(f, reps=200):
    f()
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t0) / reps * 1e6
out(kind="conv", join_us=tm(lambda: _native.joined_keys(keys)), ptrs_us=tm(lambda: _native.u64_view(ptrs)),
    sizes_us=tm(lambda: _native.u64_view(sizes)), st_us=tm(lambda: array("i", bytes(4 * N)).tolist()),
    any_us=tm(lambda: any([0] * N)))
# small batches: per-call latency (64 KiB objects)
for nk in (1, 16):
    keys = [f"probe/{tag}/small/{i}" for i in range(nk)]
    ptrs = [sp + i * NB for i in range(nk)]
    dpt = [dp + i * NB for i in range(nk)]
    sz = [NB] * nk
    assert not any(ms.batch_put_from(keys, ptrs, sz))
    lat = []
    for _ in range(300):
        t0 = time.perf_counter()
        got = ms.batch_get_into(keys, dpt, sz)
        lat.append((time.perf_counter() - t0) * 1e6)
        assert got.count(NB) == nk
    lat = sorted(lat[50:])
    plat = []
    for r in range(200):
        ks = [f"probe/{tag}/smallput/{r}/{i}" for i in range(nk)]
        t0 = time.perf_counter()
        codes = ms.batch_put_from(ks, ptrs, sz)
        plat.append((time.perf_counter() - t0) * 1e6)
        assert not any(codes)
    plat = sorted(plat[50:])
    out(kind="small", keys=nk, get_p50=lat[len(lat) // 2], get_p99=lat[int(len(lat) * .99)],
        put_p50=plat[len(plat) // 2], put_p99=plat[int(len(plat) * .99)])
    ms.remove_all(True)
for p in (sp, dp):
    ms.unregister_buffer(p)
assert ms.close() == 0
