#!/usr/bin/env python3
"""Min–max of the ratio to the ceiling per path, direction and size over the
runs of one device call. Usage: compare.py runB (variants old, mix, new:
old-N.json ...) or compare.py runA (b-N, bo-N, bb-N). Fails if any round of
any run was not verified.

compare.py ratios FILE.json...: per file, python ÷ go-embedded − 1 per
direction and size (the files' calls ran both paths), then the min–max
over the files."""
import collections, glob, json, os, re, sys

if sys.argv[1] == "ratios":
    span = collections.defaultdict(list)
    for f in sys.argv[2:]:
        j = json.load(open(f))
        assert j["ok"] and not j["errors"], (f, j["errors"])
        R = {(x["path"], x["dir"], x["size"]): x["ratio"] for x in j["results"] if x["verified"]}
        row = []
        for dr in ("put", "get"):
            for size in sorted({k[2] for k in R}):
                v = (R[("python", dr, size)] / R[("go-embedded", dr, size)] - 1) * 100
                span[(dr, size)].append(v)
                row.append(f"{dr} {size // 1024}K {v:+.1f}%")
        print(f, " ".join(row))
    for (dr, size), v in sorted(span.items()):
        print(f"{dr} {size // 1024:5d} KiB python vs Go: {min(v):+.1f} to {max(v):+.1f} % (n={len(v)})")
    sys.exit(0)

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
