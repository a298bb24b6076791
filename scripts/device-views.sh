#!/usr/bin/env bash
# On-device check of views and gather from Python (issue 15), run from the
# repository root on a GPU machine with python3 + torch after `make device`:
#
#   OUT=/some/dir scripts/device-views.sh
#
# Checks, each byte-exact against torch references built from full gets:
#   views    store.acquire(keys) as a context manager: torch tensors aliasing
#            the DRAM tier equal the objects; a plain remove is refused while
#            held and succeeds after the block
#   gather   store.gather and views.gather with a CUDA int64 index tensor
#            (a top-k's output, [keys, k]) and with host lists, against
#            torch index_select over fully gotten objects; out-of-range
#            device indices zero their rows and are counted
# and times the issue's shape from Python (64 objects x 64K rows x 1152 B,
# 2048 rows): views.gather per call (CUDA events), store.gather (wall), full
# get + index_select (wall). Writes $OUT/views.json; exits 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export KVFABRIC_LIB="${KVFABRIC_LIB:-.device/libkvfabric.so}"
export PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}"
export OUT="${OUT:-/tmp}"
mkdir -p "$OUT"
exec python3 - "$@" <<'PY'
import json, os, statistics, tempfile, time, traceback
import torch
import kvfabric

dev = torch.device("cuda", int(os.environ.get("KVFABRIC_DEVICE", "0")))
torch.cuda.set_device(dev)
OBJS = int(os.environ.get("KVFABRIC_GATHER_OBJECTS", "64"))
ROWS = int(os.environ.get("KVFABRIC_GATHER_ROWS", "65536"))
RB = 1152
SEL = 2048
K = SEL // OBJS
N = int(os.environ.get("KVFABRIC_GATHER_ITERS", "50"))
obj_bytes = ROWS * RB
cap = OBJS * obj_bytes * 5 // 4 + (1 << 30)
sock = tempfile.mkdtemp(prefix="kvf-views-")
store = kvfabric.Store({
    "driver": "cuda", "protocol": "nvlink", "master_server_addr": "embedded",
    "enable_egm_store_pool": True, "global_segment_size": cap, "max_mr_size": 1 << 30,
    "local_buffer_size": 0, "device": dev.index, "socket_dir": sock,
})
results, failures = {}, []

def check(name, fn):
    try:
        fn()
        print(f"ok   {name}", flush=True)
    except Exception:
        failures.append(name)
        print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)

keys = [f"obj{i}" for i in range(OBJS)]
g = torch.Generator(device=dev).manual_seed(15)
for k in keys:
    t = torch.randint(0, 256, (obj_bytes,), dtype=torch.uint8, device=dev, generator=g)
    store.put(k, t)
torch.cuda.synchronize()
# The reference: every object fully gotten into HBM.
full = torch.empty((OBJS, ROWS, RB), dtype=torch.uint8, device=dev)
def full_get():
    for i, r in enumerate(store.batch_get(keys, [full[i].view(-1) for i in range(OBJS)])):
        assert r == obj_bytes, f"full get of {keys[i]}: {r}"
full_get()
torch.cuda.synchronize()
idx = torch.stack([torch.randperm(ROWS, device=dev, generator=g)[:K] for _ in range(OBJS)])  # int64 [OBJS, K]
ref = torch.stack([full[i].index_select(0, idx[i]) for i in range(OBJS)]).reshape(SEL, RB)
out = torch.empty((SEL, RB), dtype=torch.uint8, device=dev)

def views_check():
    with store.acquire(keys[:4]) as views:
        for i, v in enumerate(views):
            t = v.tensor()
            assert t.numel() == obj_bytes and torch.equal(t, full[i].view(-1)), f"view {i} differs"
        try:
            store.remove(keys[0])
            raise AssertionError("plain remove of a held object succeeded")
        except kvfabric.HasLeaseError:
            pass
    store.remove(keys[0])
    store.put(keys[0], full[0].view(-1).clone())
    torch.cuda.synchronize()
check("views: tensors alias the objects; remove refused while held", views_check)

def gather_check():
    out.zero_()
    bad = store.gather(keys, idx, RB, out)
    torch.cuda.synchronize()
    assert torch.equal(out, ref), "store.gather (device int64 indices) differs"
    assert bad is None or int(bad.item()) == 0
    out.zero_()
    store.gather(keys, idx.cpu().tolist(), RB, out)
    assert torch.equal(out, ref), "store.gather (host lists) differs"
    with store.acquire(keys) as views:
        out.zero_()
        bad = views.gather(idx.to(torch.int32), RB, out)
        torch.cuda.current_stream().synchronize()
        assert torch.equal(out, ref), "views.gather (device int32) differs"
        views.check()
        oob = idx.clone()
        oob[0, 0], oob[1, 1] = ROWS, -1
        out.zero_()
        bad = views.gather(oob, RB, out)
        torch.cuda.current_stream().synchronize()
        assert int(bad.item()) == 2, f"{int(bad.item())} rows counted out of range, want 2"
        exp = ref.clone()
        exp[0].zero_(); exp[K + 1].zero_()
        assert torch.equal(out, exp), "out-of-range rows not zeroed, or others differ"
check("gather: byte-exact vs index_select of full gets", gather_check)

def timing():
    s = torch.cuda.current_stream()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with store.acquire(keys) as views:
        per = []
        for it in range(N + 5):
            e0.record(s); views.gather(idx, RB, out); e1.record(s); e1.synchronize()
            if it >= 5:
                per.append(e0.elapsed_time(e1) * 1e3)
        assert torch.equal(out, ref)
        e0.record(s)
        for _ in range(N):
            views.gather(idx, RB, out)
        e1.record(s); e1.synchronize()
        b2b = e0.elapsed_time(e1) * 1e3 / N
        assert torch.equal(out, ref)
        # Without the per-call counter tensor (its allocation and fill kernel).
        nc, issue = [], []
        for it in range(N + 5):
            out.zero_(); torch.cuda.synchronize()
            e0.record(s); t0 = time.perf_counter_ns(); views.gather(idx, RB, out, counter=False)
            t1 = time.perf_counter_ns(); e1.record(s); e1.synchronize()
            if it >= 5:
                nc.append(e0.elapsed_time(e1) * 1e3); issue.append((t1 - t0) / 1e3)
        assert torch.equal(out, ref)
    wall = []
    for it in range(N + 5):
        t0 = time.perf_counter_ns(); store.gather(keys, idx, RB, out); torch.cuda.synchronize()
        if it >= 5:
            wall.append((time.perf_counter_ns() - t0) / 1e3)
    assert torch.equal(out, ref)
    fg = []
    for it in range(4):
        t0 = time.perf_counter_ns(); full_get()
        sel = torch.stack([full[i].index_select(0, idx[i]) for i in range(OBJS)]).reshape(SEL, RB)
        torch.cuda.synchronize()
        if it >= 1:
            fg.append((time.perf_counter_ns() - t0) / 1e3)
    assert torch.equal(sel, ref)
    # The link's ceiling: one 64 MiB copy from the DRAM tier (a view).
    with store.acquire(keys[:1]) as views:
        src = views[0].tensor()[: 64 << 20]
        dst = torch.empty_like(src)
        ts = []
        for it in range(6):
            e0.record(s); dst.copy_(src); e1.record(s); e1.synchronize()
            if it:
                ts.append(e0.elapsed_time(e1) / 1e3)
        link = (64 << 20) / statistics.median(ts) / 1e9
    sel_bytes = SEL * RB
    p50 = statistics.median(per)
    results.update({
        "objects": OBJS, "rows": ROWS, "row_bytes": RB, "selected": SEL, "iters": N,
        "link_gbps": round(link, 2),
        "views_gather_p50_us": round(p50, 1), "views_gather_min_us": round(min(per), 1),
        "views_gather_b2b_us": round(b2b, 1),
        "views_gather_nocount_p50_us": round(statistics.median(nc), 1),
        "views_gather_nocount_issue_p50_us": round(statistics.median(issue), 1),
        "views_gather_nocount_ratio": round(sel_bytes / (statistics.median(nc) / 1e6) / 1e9 / link, 3),
        "views_gather_ratio": round(sel_bytes / (p50 / 1e6) / 1e9 / link, 3),
        "views_gather_b2b_ratio": round(sel_bytes / (b2b / 1e6) / 1e9 / link, 3),
        "store_gather_wall_p50_us": round(statistics.median(wall), 1),
        "full_get_select_wall_p50_us": round(statistics.median(fg), 1),
        "speedup_vs_full_get_select": round(statistics.median(fg) / p50, 1),
    })
    print(json.dumps(results, indent=1), flush=True)
check("timing (issue 15 shape)", timing)

store.close()
with open(os.path.join(os.environ["OUT"], "views.json"), "w") as f:
    json.dump({"results": results, "failures": failures}, f, indent=1)
print(f"{'FAILED: ' + ', '.join(failures) if failures else 'all passed'}")
raise SystemExit(1 if failures else 0)
PY
