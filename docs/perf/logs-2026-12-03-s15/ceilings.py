#!/usr/bin/env python3
"""Every bench --store ceiling in the JSON logs under docs/perf taken with
the CUDA driver (the H200): how many, how many below 53 GB/s, min/median/max.
Run from docs/perf: python3 logs-2026-12-03-s15/ceilings.py"""
import glob
import json
import statistics

vals = []
for f in sorted(glob.glob("logs-*/**/*.json", recursive=True)):
    try:
        d = json.load(open(f))
    except Exception:  # noqa: BLE001
        continue
    if not isinstance(d, dict) or not d.get("ceilings") or not str(d.get("driver", "")).startswith("CUDA"):
        continue
    for c in d["ceilings"]:
        vals.append((c["put_gbps"], c["get_gbps"], f))
low = [v for v in vals if min(v[0], v[1]) < 53]
print(f"{len(vals)} ceilings, {len(low)} below 53 GB/s")
for v in low:
    print("  put %.2f get %.2f %s" % v)
for i, d in ((0, "put"), (1, "get")):
    xs = [v[i] for v in vals]
    print(f"{d} min {min(xs):.2f} median {statistics.median(xs):.2f} max {max(xs):.2f}")
