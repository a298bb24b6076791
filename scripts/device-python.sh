#!/usr/bin/env bash
# On-device check of the Python package (issue 6), run from the repository
# root on a GPU machine with python3 + torch:
#
#   go build -buildmode=c-shared -o .device/libkvfabric.so ./capi   # on the dev machine
#   scripts/device-python.sh                                        # on the device
#
# Uses KVFABRIC_LIB (default .device/libkvfabric.so) and PYTHONPATH=python.
# KVFABRIC_INSTALLED=1 tests the kvfabric package python3 imports as
# installed (a wheel: scripts/device-wheel.sh) instead: KVFABRIC_LIB unset,
# the checkout kept off sys.path.
# Checks: torch CUDA tensors through kvfabric.Store into the EGM DRAM tier
# and back, byte-equal (single, scatter/gather, batch); a put enqueued right
# after a kernel that writes the tensor on the same stream, without a sync;
# the Mooncake facade with CUDA device buffers (and a pinned host pool)
# registered; views (tensor() aliasing the EGM object, release) and gathers
# with top-k device indices, host indices and the one-shot form, byte-exact.
# Prints one line per check and a summary; exits 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "${KVFABRIC_INSTALLED:-}" = 1 ]; then
    unset KVFABRIC_LIB
    cd "${TMPDIR:-/tmp}"   # not the checkout: python3 - puts the cwd on sys.path
else
    export KVFABRIC_LIB="${KVFABRIC_LIB:-.device/libkvfabric.so}"
    export PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}"
fi
exec python3 - "$@" <<'PY'
import os, sys, time, tempfile, traceback
import torch
import kvfabric
from kvfabric.compat.mooncake import MooncakeDistributedStore, ReplicateConfig

MIB = 1 << 20
dev = torch.device("cuda", int(os.environ.get("KVFABRIC_DEVICE", "0")))
torch.cuda.set_device(dev)
sock = tempfile.mkdtemp(prefix="kvf-py-")
CFG = {
    "driver": "cuda", "protocol": "nvlink", "master_server_addr": "embedded",
    "enable_egm_store_pool": True, "global_segment_size": os.environ.get("KVFABRIC_SEGMENT", "4GiB"),
    "local_buffer_size": 0, "device": dev.index, "socket_dir": sock,
}
results = []

def check(name):
    def wrap(fn):
        t0 = time.perf_counter()
        try:
            detail = fn() or ""
            results.append((True, name, detail, time.perf_counter() - t0))
        except Exception as e:  # noqa: BLE001
            tb = traceback.format_exc().strip().splitlines()
            results.append((False, name, f"{type(e).__name__}: {e} @ {tb[-3].strip() if len(tb) > 2 else ''}",
                            time.perf_counter() - t0))
        return fn
    return wrap

def rand_u8(n):
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device=dev)

from kvfabric import _native
print(f"device-python: torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, kvfabric {kvfabric.__version__} "
      f"from {os.path.dirname(kvfabric.__file__)}, lib {_native.library_path()} ({_native.library_version()})")
store = kvfabric.Store(CFG)

@check("store: cuda tensors -> EGM DRAM tier -> back, byte-equal")
def _():
    out = []
    for n in (4096, 64 * 1024, MIB, 16 * MIB, 256 * MIB):
        x = rand_u8(n)
        y = torch.zeros_like(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter(); store.put(f"t{n}", x); t1 = time.perf_counter()
        got = store.get(f"t{n}", y); t2 = time.perf_counter()
        assert got == n, (got, n)
        assert torch.equal(x, y), f"mismatch at {n} bytes"
        out.append(f"{n >> 10}KiB put {n / (t1 - t0) / 1e9:.1f} get {n / (t2 - t1) / 1e9:.1f} GB/s")
    # Dtypes/shapes: a bf16 2-D tensor.
    a = torch.randn(1024, 2048, device=dev).to(torch.bfloat16)
    b = torch.empty_like(a)
    store.put("bf16", a); store.get("bf16", b)
    assert torch.equal(a, b)
    return "; ".join(out)

@check("store: scatter/gather parts and batch_put/batch_get of 128 x 64KiB")
def _():
    p1, p2 = rand_u8(3 * MIB), rand_u8(MIB)
    store.put("sg", [p1, p2])
    o = torch.zeros(4 * MIB, dtype=torch.uint8, device=dev)
    assert store.get("sg", [o[:MIB], o[MIB:]]) == 4 * MIB
    assert torch.equal(o, torch.cat([p1, p2]))
    keys = [f"b{i}" for i in range(128)]
    xs = [rand_u8(64 * 1024) for _ in keys]
    ys = [torch.zeros_like(x) for x in xs]
    torch.cuda.synchronize()
    t0 = time.perf_counter(); r = store.batch_put(keys, xs); t1 = time.perf_counter()
    assert r == [None] * 128, r[:3]
    g = store.batch_get(keys, ys); t2 = time.perf_counter()
    assert g == [64 * 1024] * 128, g[:3]
    assert all(torch.equal(x, y) for x, y in zip(xs, ys))
    n = 128 * 64 * 1024
    return f"batch put {n / (t1 - t0) / 1e9:.1f} GB/s, get {n / (t2 - t1) / 1e9:.1f} GB/s"

@check("store: put right after the writing kernel on the same stream, no sync")
def _():
    s = torch.cuda.Stream(dev)
    n = 64 * MIB
    fails = 0
    for i in range(5):
        with torch.cuda.stream(s):
            x = torch.zeros(n, dtype=torch.uint8, device=dev)
            torch.cuda._sleep(50_000_000)        # ~25-50 ms of GPU time before the write
            x.fill_(i + 7)                       # the kernel that writes the tensor
            store.put(f"ord{i}", x)              # enqueued on s (the current stream), no sync
            y = torch.empty_like(x)
            store.get(f"ord{i}", y)
            ok = bool((y == i + 7).all().item())
        fails += not ok
    # Explicit stream argument too (a non-current stream that wrote the data).
    s2 = torch.cuda.Stream(dev)
    with torch.cuda.stream(s2):
        z = torch.zeros(n, dtype=torch.uint8, device=dev)
        torch.cuda._sleep(50_000_000)
        z.fill_(99)
    store.put("ord-explicit", z, stream=s2)
    w = torch.empty_like(z)
    store.get("ord-explicit", w, stream=s2)
    torch.cuda.synchronize()
    assert fails == 0, f"{fails}/5 puts read stale data"
    assert bool((w == 99).all().item()), "explicit stream put read stale data"
    return "5/5 current-stream puts and 1 explicit-stream put saw the kernel's bytes"

@check("store: errors (miss, duplicate, too small) and exists/remove")
def _():
    y = torch.empty(16, dtype=torch.uint8, device=dev)
    try:
        store.get("nope", y); raise AssertionError("no NotFoundError")
    except KeyError:
        pass
    try:
        store.put("t4096", rand_u8(4096)); raise AssertionError("no AlreadyExistsError")
    except kvfabric.AlreadyExistsError:
        pass
    try:
        store.get("t65536", y); raise AssertionError("no BufferTooSmallError")
    except kvfabric.BufferTooSmallError:
        pass
    assert store.exists("t4096") and store.batch_exists(["t4096", "nope"]) == [True, False]
    n = store.remove_all()
    return f"remove_all removed {n}"

@check("mooncake facade: device buffers registered, SGLang/vLLM call sequence")
def _():
    ms = MooncakeDistributedStore()
    rc = ms.setup("localhost", "P2PHANDSHAKE", 1 << 30, 16 << 20, "nvlink", "", "embedded",
                  enable_egm_store_pool=True, driver="cuda", device=dev.index, socket_dir=sock)
    assert rc == 0, rc
    page, npages = 256 * 1024, 64
    kv = rand_u8(page * npages)                 # a GPU KV pool
    dst = torch.zeros_like(kv)
    host = torch.zeros(page * npages, dtype=torch.uint8, pin_memory=True)  # a pinned host pool
    for t in (kv, dst, host):
        assert ms.register_buffer(t.data_ptr(), t.numel()) == 0
    torch.cuda.synchronize()
    keys = [f"page{i}" for i in range(npages)]
    assert ms.batch_is_exist(keys) == [0] * npages
    ptrs = [kv.data_ptr() + i * page for i in range(npages)]
    assert ms.batch_put_from(keys, ptrs, [page] * npages) == [0] * npages
    assert ms.batch_is_exist(keys) == [1] * npages
    got = ms.batch_get_into(keys, [dst.data_ptr() + i * page for i in range(npages)], [page] * npages)
    assert got == [page] * npages, got[:4]
    assert torch.equal(kv, dst)
    # Device -> EGM -> pinned host.
    got = ms.batch_get_into(keys[:8], [host.data_ptr() + i * page for i in range(8)], [page] * 8)
    assert got == [page] * 8 and torch.equal(host[: 8 * page], kv[: 8 * page].cpu())
    # vLLM-style multi-buffer (K and V halves per key).
    half = page // 2
    mk = [f"kv{i}" for i in range(16)]
    rc = ms.batch_put_from_multi_buffers(mk, [[kv.data_ptr() + i * page, kv.data_ptr() + i * page + half] for i in range(16)],
                                         [[half, half]] * 16, ReplicateConfig())
    assert rc == [0] * 16, rc
    dst.zero_(); torch.cuda.synchronize()
    got = ms.batch_get_into_multi_buffers(mk, [[dst.data_ptr() + i * page, dst.data_ptr() + i * page + half] for i in range(16)],
                                          [[half, half]] * 16)
    assert got == [page] * 16, got[:4]
    assert torch.equal(kv[: 16 * page], dst[: 16 * page])
    assert ms.get_into("page0", dst.data_ptr(), 16) < 0          # too small
    assert ms.get_into("absent", dst.data_ptr(), page) == -704
    assert ms.put("bytes", b"hello") == 0 and ms.get("bytes") == b"hello"
    n = ms.remove_all()
    for t in (kv, dst, host):
        assert ms.unregister_buffer(t.data_ptr()) == 0
    assert ms.close() == 0 and ms.close() == 0
    return f"{npages} pages of {page >> 10}KiB + 16 multi-buffer keys; remove_all={n}"

@check("views: tensor() aliases the EGM object (a kernel reads it in place), check, with-block release")
def _():
    x = rand_u8(4 * MIB)
    store.put("view0", x)
    with store.acquire(["view0", "absent"]) as views:
        v, missing = views
        assert isinstance(missing.error, KeyError) and not hasattr(missing, "__cuda_array_interface__")
        cai = v.__cuda_array_interface__
        assert cai["data"] == (v.ptr, True) and cai["shape"] == (x.numel(),), cai
        t = v.tensor()
        assert t.is_cuda and t.device == dev and t.dtype == torch.uint8 and t.numel() == x.numel()
        assert t.data_ptr() == v.ptr, "tensor() copied instead of aliasing"
        assert torch.equal(t, x)                 # kernels reading DRAM over the link
        try:
            store.remove("view0"); raise AssertionError("a held object was removed")
        except kvfabric.HasLeaseError:
            pass
        views.check()
    assert views.released
    store.remove("view0")                        # released: a plain remove succeeds
    return f"view of {x.numel() >> 20} MiB at {v.ptr:#x}"

@check("gather: top-k device indices (int64/int32, out-of-range counted), explicit stream, host ragged, one-shot")
def _():
    R, NROW, NOBJ, K = 1152, 4096, 8, 256
    keys = [f"g{i}" for i in range(NOBJ)]
    objs = [rand_u8(NROW * R) for _ in keys]
    for k, o in zip(keys, objs):
        store.put(k, o)
    ref = torch.stack([o.view(NROW, R) for o in objs])              # [NOBJ, NROW, R]

    def want(idx):
        i = idx.long().clamp(0, NROW - 1)
        w = torch.gather(ref, 1, i[..., None].expand(-1, -1, R))
        return torch.where(((idx >= 0) & (idx < NROW))[..., None], w, torch.zeros_like(w))

    idx64 = torch.rand(NOBJ, NROW, device=dev).topk(K, dim=-1).indices  # a top-k's output as is
    out = torch.empty(NOBJ * K * R, dtype=torch.uint8, device=dev)
    with store.acquire(keys) as views:
        for idx in (idx64, idx64.to(torch.int32)):
            out.fill_(0xEE)
            bad = views.gather(idx, R, out)                       # current stream, no wait
            torch.cuda.current_stream().synchronize()
            assert torch.equal(out.view(NOBJ, K, R), want(idx)), f"{idx.dtype} gather differs"
            assert bad.dtype == torch.int32 and bad.is_cuda and bad.item() == 0, bad
        idx = idx64.clone()
        idx[0, 0], idx[1, 1], idx[2, 2] = -1, NROW, 1 << 40
        s = torch.cuda.Stream(dev)
        s.wait_stream(torch.cuda.current_stream())
        bad = views.gather(idx, R, out, stream=s)                 # counter zeroed on s
        s.synchronize()
        assert bad.item() == 3, bad.item()
        assert torch.equal(out.view(NOBJ, K, R), want(idx))
        sel = [[0, 5, NROW - 1], [], [7]] + [[1]] * (NOBJ - 3)
        assert views.gather(sel, R, out) is None
        torch.cuda.current_stream().synchronize()
        flat = torch.cat([ref[i, r] for i, rs in enumerate(sel) for r in rs])
        assert torch.equal(out[: flat.numel()], flat.view(-1))
        views.check()
    out.fill_(0xEE)
    bad = store.gather(keys, idx64, R, out)                       # one-shot: returns when done
    assert bad.item() == 0 and torch.equal(out.view(NOBJ, K, R), want(idx64))
    store.remove_all()
    return f"{NOBJ} objects x {NROW} rows of {R} B, k={K}"

@check("store: close")
def _():
    store.close()
    assert store.closed

ok = sum(r[0] for r in results)
for passed, name, detail, dt in results:
    print(f"{'PASS' if passed else 'FAIL'} {name} ({dt:.2f}s){': ' + detail if detail else ''}")
print(f"device-python: {ok}/{len(results)} passed")
sys.exit(0 if ok == len(results) else 1)
PY
