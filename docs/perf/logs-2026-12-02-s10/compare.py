#!/usr/bin/env python3
"""Min–max of the ratio to the ceiling per path, direction and size over the
runs of one device call. Usage: compare.py runB (variants old, mix, new:
old-N.json ...) or compare.py runA (b-N, bo-N, bb-N). Fails if any round of
any run was not verified."""
import collections, glob, json, os, re, sys

d = sys.argv[1]
R = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    v = re.sub(r"-\d+\.json$", "", os.path.basename(f))
    j = json.load(open(f))
    assert j["ok"] and not j["errors"], (f, j["errors"])
    for x in j["results"]:
        assert x["verified"], (f, x)
        R[(v, x["path"], x["dir"], x["size"])].append(x["ratio"])
cols = sorted({(v, p) for v, p, _, _ in R})
for dr in ("put", "get"):
    for size in sorted({k[3] for k in R}):
        row = [f"{dr} {size // 1024:5d} KiB"]
        for v, p in cols:
            r = R.get((v, p, dr, size))
            if r:
                row.append(f"{v}/{p} {min(r):.3f}-{max(r):.3f} (n={len(r)})")
        print("  ".join(row))
