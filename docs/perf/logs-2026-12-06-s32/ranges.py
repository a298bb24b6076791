#!/usr/bin/env python3
"""Min-max of bench --store ratios and per-batch milliseconds over the
JSON files given, by (path, dir, size); python / go-embedded per run."""
import json
import sys
from collections import defaultdict

rows = defaultdict(list)
ms = defaultdict(list)
per_file = []
for f in sys.argv[1:]:
    d = json.load(open(f))
    one = {}
    for r in d["results"]:
        k = (r["path"], r["dir"], r["size"])
        rows[k].append(r["ratio"])
        ms[k].append(r["seconds"] / r["timed_rounds"] / r["batches_per_round"] * 1e3)  # seconds: all timed rounds
        one[k] = r["ratio"]
    per_file.append(one)
for k in sorted(rows):
    print(f"{k[0]:12s} {k[1]:4s} {k[2]//1024:4d}KiB ratio {min(rows[k]):.3f}-{max(rows[k]):.3f}  "
          f"ms/batch {min(ms[k]):.3f}-{max(ms[k]):.3f}  (n={len(rows[k])})")
py = defaultdict(list)
for one in per_file:
    for (p, dr, sz), v in one.items():
        if p == "python" and ("go-embedded", dr, sz) in one:
            py[(dr, sz)].append(v / one[("go-embedded", dr, sz)])
for k in sorted(py):
    print(f"python/go {k[0]:4s} {k[1]//1024:4d}KiB {min(py[k]):.3f}-{max(py[k]):.3f}")
