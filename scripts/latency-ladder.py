"""The Python rungs of the latency ladder (docs/perf/latency.md, "dev VM
ladder"; scripts/latency-ladder.sh runs it): one small call at a time from
Python against a `kvfabric master` process on loopback, with the simulator
driver (no GPU needed) or, with KVFABRIC_LADDER_DRIVER=cuda, the real one.

    python3 scripts/latency-ladder.py [N]

Environment: KVFABRIC_LIB (the library), KVFABRIC_BIN (the kvfabric binary
that serves the master; default build/kvfabric), KVFABRIC_LADDER_DRIVER
(sim). For a 4 KiB object in a registered host buffer (sim) or a device
buffer (cuda), after 200 warm-up calls, N calls each (default 5000):

    py/exists      Store.exists(key): one master round trip
    py/ctypes-get  the library's kvfabric_get through ctypes, arguments
                   prepared once (the native call alone)
    py/get         Store.get(key, (ptr, nbytes))

and the same three with the embedded master for comparison. Prints one
line per call in Go's benchmark format (BenchmarkPython/<master>/<call> N
<mean> ns/op <p50> p50-us <p99> p99-us <min> min-us) for benchstat; the
bytes read are checked against those put.
"""

import ctypes
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import kvfabric  # noqa: E402
from kvfabric import _native  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
SIZE = 4096
DRIVER = os.environ.get("KVFABRIC_LADDER_DRIVER", "sim")


def line(name, ns):
    us = sorted(x / 1e3 for x in ns)
    p50, p99, lo = us[len(us) // 2], us[(len(us) - 1) * 99 // 100], us[0]
    mean = statistics.fmean(ns)
    print(f"BenchmarkPython/{name} \t{len(ns)}\t{mean:.0f} ns/op\t{p50:.2f} p50-us\t{p99:.2f} p99-us\t{lo:.2f} min-us",
          flush=True)


def timed(fn):
    for _ in range(200):
        fn()
    out = []
    for _ in range(N):
        t0 = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t0)
    return out


def rungs(where, cfg):
    s = kvfabric.Store(cfg)
    try:
        if DRIVER == "sim":
            buf = ctypes.create_string_buffer(SIZE)
            ptr = ctypes.addressof(buf)
            s.register_buffer(ptr, SIZE)
            read = lambda: bytes(buf)  # noqa: E731
        else:
            import torch

            t = torch.empty(SIZE, dtype=torch.uint8, device="cuda")
            ptr = t.data_ptr()
            read = lambda: bytes(t.cpu().numpy())  # noqa: E731
        want = bytes((i * 7 + 3) & 0xFF for i in range(SIZE))
        ctypes.memmove(ptr, want, SIZE) if DRIVER == "sim" else t.copy_(torch.frombuffer(bytearray(want), dtype=torch.uint8))
        key = "lat-4k"
        s.put(key, (ptr, SIZE))
        if DRIVER == "sim":
            ctypes.memset(ptr, 0, SIZE)
        else:
            t.zero_()
        k = key.encode()
        h = s._h
        ptrs, lens, n = _native.u64_array([ptr]), _native.u64_array([SIZE]), ctypes.c_uint64(0)
        lib = s._lib

        def native_get():
            if lib.kvfabric_get(h, k, len(k), ptrs, lens, 1, 0, ctypes.byref(n)) != 0:
                raise RuntimeError("kvfabric_get failed")

        res = {
            "exists": timed(lambda: s.exists(key)),
            "ctypes-get": timed(native_get),
            "get": timed(lambda: s.get(key, (ptr, SIZE))),
        }
        ok = read() == want
        for name, ns in res.items():
            line(f"{where}/{name}", ns)
        print(f"# python {where}: bytes_ok={ok}", flush=True)
        s.remove(key, force=True)
        if DRIVER == "sim":
            s.unregister_buffer(ptr)
        return ok
    finally:
        s.close()


def main():
    sock = tempfile.mkdtemp(prefix="kvf-ladder-")
    cfg = {
        "driver": DRIVER, "protocol": "nvlink", "master_server_addr": "embedded",
        "enable_egm_store_pool": True, "global_segment_size": "64MiB", "local_buffer_size": 0,
        "local_hostname": "ladder", "socket_dir": sock,
    }
    exe = os.environ.get("KVFABRIC_BIN", "build/kvfabric")
    addr_file = os.path.join(sock, "addr")
    m = subprocess.Popen([exe, "master", "--listen", "127.0.0.1:0", "--addr-file", addr_file, "--metrics-listen", ""],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            if os.path.exists(addr_file) and pathlib.Path(addr_file).read_text().strip():
                break
            time.sleep(0.05)
        addr = pathlib.Path(addr_file).read_text().strip()
        ok = rungs("remote", dict(cfg, master_server_addr=addr))
    finally:
        m.terminate()
        m.wait(timeout=10)
    ok = rungs("embedded", cfg) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
