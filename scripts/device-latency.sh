#!/usr/bin/env bash
# Single-object get latency on a GPU machine (issue 13, item 4): where the
# time of one small get goes, from Python, on the EGM (HOST_NUMA) tier with
# an embedded master. Run from the repository root after `make device`:
#
#   OUT=/some/dir scripts/device-latency.sh
#
# For 4 KiB and 64 KiB objects it measures, each N times after a warm-up
# (p50, p99, min in µs):
#   torch-copy      pinned host -> HBM tensor copy + stream sync (the floor)
#   facade          MooncakeDistributedStore.get_into(key, ptr, size)
#   store-ptr       kvfabric.Store.get(key, (ptr, nbytes))
#   store-tensor    kvfabric.Store.get(key, tensor)           (torch stream)
#   store-tensor-s0 kvfabric.Store.get(key, tensor, stream=0)
#   remote-store-*  the Store gets again with a `kvfabric master` process on
#                   loopback instead of the embedded one
# and, for store-tensor, the Python-side split: resolving the tensor
# (_parts: contiguity, data_ptr, current stream) vs the native call.
# Every get's bytes are checked against the value put (outside the timed
# region, on a sample). Writes $OUT/latency.json and prints a table.
set -uo pipefail
cd "$(dirname "$0")/.."
export KVFABRIC_LIB="${KVFABRIC_LIB:-.device/libkvfabric.so}"
export PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}"
export OUT="${OUT:-/tmp}"
mkdir -p "$OUT"
exec python3 - "$@" <<'PY'
import json, os, statistics, tempfile, time
import torch
import kvfabric
from kvfabric import store as kst
from kvfabric.compat.mooncake import MooncakeDistributedStore

N = int(os.environ.get("KVFABRIC_LAT_N", "2000"))
dev = torch.device("cuda", int(os.environ.get("KVFABRIC_DEVICE", "0")))
torch.cuda.set_device(dev)
sock = tempfile.mkdtemp(prefix="kvf-lat-")
CFG = {
    "driver": "cuda", "protocol": "nvlink", "master_server_addr": "embedded",
    "enable_egm_store_pool": True, "global_segment_size": "2GiB",
    "local_buffer_size": 0, "device": dev.index, "socket_dir": sock,
}
CFG.update(json.loads(os.environ.get("KVFABRIC_LAT_CFG", "{}")))  # e.g. {"copy_engine_min_bytes": "1"}

def stats(ns):
    us = sorted(x / 1e3 for x in ns)
    return {"p50": round(statistics.median(us), 2), "p99": round(us[int(0.99 * (len(us) - 1))], 2),
            "min": round(us[0], 2), "n": len(us)}

def timed(fn, n=N):
    for _ in range(50):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out

results = {}
s = kvfabric.Store(CFG)
mc = MooncakeDistributedStore()
mc._store = s  # the facade over the same Store (internal hook), so both paths read the same objects
try:
    for size in (4 << 10, 64 << 10):
        key = f"lat-{size}"
        src = torch.randint(0, 256, (size,), dtype=torch.uint8, device=dev)
        s.put(key, src)
        torch.cuda.synchronize()
        dst = torch.empty(size, dtype=torch.uint8, device=dev)
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        r = {}
        r["torch-copy"] = stats(timed(lambda: (dst.copy_(pinned, non_blocking=True), torch.cuda.current_stream().synchronize())))
        ptr = dst.data_ptr()
        r["facade"] = stats(timed(lambda: mc.get_into(key, ptr, size)))
        r["store-ptr"] = stats(timed(lambda: s.get(key, (ptr, size))))
        r["store-tensor"] = stats(timed(lambda: s.get(key, dst)))
        r["store-tensor-s0"] = stats(timed(lambda: s.get(key, dst, stream=0)))
        # Python-side split of store-tensor.
        r["py-resolve-tensor"] = stats(timed(lambda: kst._parts(dst, True)))
        r["py-current-stream"] = stats(timed(lambda: torch.cuda.current_stream(dst.device).cuda_stream))
        k = kst._key(key)
        bufs = kst._parts(dst, True)
        r["native-get-only"] = stats(timed(lambda: s._get(k, bufs, None)))
        # Byte check (after the timed loops: every path read this object).
        dst.zero_()
        n = s.get(key, dst)
        torch.cuda.synchronize()
        ok = n == size and torch.equal(dst, src)
        dst.zero_()
        got = mc.get_into(key, ptr, size)
        torch.cuda.synchronize()
        ok = ok and got == size and torch.equal(dst, src)
        r["bytes_ok"] = bool(ok)
        results[str(size)] = r
        print(f"size {size} bytes_ok={ok}")
        for name, v in r.items():
            if isinstance(v, dict):
                print(f"  {name:18s} p50 {v['p50']:8.2f} µs  p99 {v['p99']:8.2f}  min {v['min']:8.2f}")
finally:
    mc._store = None
    s.close()
# The same gets through a remote master (a `kvfabric master` process on
# loopback): this process provides the DRAM and reads it back.
import subprocess, pathlib
kv = os.environ.get("KVFABRIC_BIN", ".device/kvfabric")
addr_file = os.path.join(sock, "addr")
# KVFABRIC_LAT_MASTER_ARGS: more flags of the master (e.g. "--fast-spin 0").
m = subprocess.Popen([kv, "master", "--listen", "127.0.0.1:0", "--addr-file", addr_file, "--metrics-listen", ""]
                     + os.environ.get("KVFABRIC_LAT_MASTER_ARGS", "").split(),
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(200):
        if os.path.exists(addr_file) and pathlib.Path(addr_file).read_text().strip():
            break
        time.sleep(0.05)
    rcfg = dict(CFG, master_server_addr=pathlib.Path(addr_file).read_text().strip())
    rs = kvfabric.Store(rcfg)
    try:
        for size in (4 << 10, 64 << 10):
            key = f"rlat-{size}"
            src = torch.randint(0, 256, (size,), dtype=torch.uint8, device=dev)
            rs.put(key, src)
            dst = torch.empty(size, dtype=torch.uint8, device=dev)
            ptr = dst.data_ptr()
            r = results.setdefault(str(size), {})
            r["remote-store-ptr"] = stats(timed(lambda: rs.get(key, (ptr, size))))
            r["remote-store-tensor"] = stats(timed(lambda: rs.get(key, dst)))
            dst.zero_()
            ok = rs.get(key, dst) == size
            torch.cuda.synchronize()
            r["bytes_ok"] = bool(r.get("bytes_ok", True) and ok and torch.equal(dst, src))
            print(f"remote master, size {size} bytes_ok={r['bytes_ok']}")
            for name in ("remote-store-ptr", "remote-store-tensor"):
                v = r[name]
                print(f"  {name:20s} p50 {v['p50']:8.2f} µs  p99 {v['p99']:8.2f}  min {v['min']:8.2f}")
    finally:
        rs.close()
finally:
    m.terminate()
    m.wait(timeout=10)
with open(os.path.join(os.environ["OUT"], os.environ.get("KVFABRIC_LAT_JSON", "latency.json")), "w") as f:
    json.dump(results, f, indent=1)
raise SystemExit(0 if all(r["bytes_ok"] for r in results.values()) else 1)
PY
