#!/usr/bin/env python3
"""Summarises pyprobe.py logs: python3 probe_summary.py runX/probe-*.log

Per (tag, object size, mode, direction): n, min, median and max µs of one
4096-key batch call; the minor page faults per call (run D on); the
step split of the steps mode (min-max µs); the small-batch latencies."""
import collections
import json
import sys

d = collections.defaultdict(list)
faults = collections.defaultdict(list)
steps = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for line in open(f):
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        if m["kind"] == "batch":
            assert m["ok"], (f, m)
            for op in ("put", "get"):
                d[(m["tag"], m["size"], m["mode"], op)].append(m[op + "_us"])
            if "put_faults" in m:
                faults[(m["tag"], m["size"], m["mode"])].append((m["put_faults"], m["get_faults"]))
            for k, v in (m.get("steps") or {}).items():
                steps[(m["tag"], m["size"])][k].append(v)
        elif m["kind"] == "small":
            print(f"{f}: {m['keys']}-key batch of 64 KiB: get p50 {m['get_p50']:.1f} p99 {m['get_p99']:.1f} µs, "
                  f"put p50 {m['put_p50']:.1f} p99 {m['put_p99']:.1f}")
        elif m["kind"] == "conv":
            print(f"{f}: conversions µs: " + ", ".join(f"{k[:-3]} {v:.0f}" for k, v in m.items() if k.endswith("_us")))
for k in sorted(d):
    v = sorted(d[k])
    print("%-6s %6d %-6s %s  n=%2d  min %5.0f  med %5.0f  max %5.0f µs" % (k[0], k[1], k[2], k[3], len(v), v[0], v[len(v) // 2], v[-1]))
for k in sorted(faults):
    print("faults per call (put, get)", k, faults[k])
for k in sorted(steps):
    print("steps µs", k, ", ".join(f"{n} {min(v):.0f}-{max(v):.0f}" for n, v in steps[k].items()))
