#!/usr/bin/env python3
"""Min-max of each bench --store JSON group in a log directory.

A file NAME-REP.json (or NAME.json) belongs to group NAME. For each group,
path, direction and object size: the ratio to the ceiling (min-max over
the group's files), and the share of keys whose copy was merged into the
one before (merged_copies_per_key, min-max). Every file must say ok; a
file that does not is named and left out of its group."""
import collections, glob, json, os, re, sys

d = sys.argv[1] if len(sys.argv) > 1 else "."
groups = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(d, "*.json"))):
    name = re.sub(r"-\d+$", "", os.path.basename(f)[:-5])
    try:
        rep = json.load(open(f))
    except (OSError, ValueError) as e:
        print(f"{f}: unreadable ({e})")
        continue
    if not rep.get("ok"):
        print(f"{f}: not ok: {rep.get('errors')}")
        continue
    groups[name].append(rep)

def size_label(n):
    return f"{n >> 20}MiB" if n >= 1 << 20 else f"{n >> 10}KiB"

for name, reps in groups.items():
    ratios = collections.defaultdict(list)
    merged = collections.defaultdict(list)
    for rep in reps:
        for r in rep["results"]:
            if r["gpu"] < 0:
                continue
            k = (r["path"], r["dir"], r["size"])
            ratios[k].append(r["ratio"])
            if r.get("merged_copies_per_key") is not None:
                merged[k].append(r["merged_copies_per_key"])
    print(f"== {name} ({len(reps)} runs)")
    for k in sorted(ratios, key=lambda k: (k[0], k[1], k[2])):
        v = ratios[k]
        line = f"  {k[0]:12s} {k[1]:3s} {size_label(k[2]):>7s}  ratio {min(v):.3f}-{max(v):.3f}"
        if merged[k]:
            line += f"  merged/key {min(merged[k]):.3f}-{max(merged[k]):.3f}"
        print(line)
