#!/usr/bin/env python3
"""Min-max per benchmark of session 31's logs: python3 ranges.py run1 run2 devvm"""
import re, sys, glob, collections, json
for run in sys.argv[1:]:
    print("==", run)
    r = collections.defaultdict(list)
    files = glob.glob(f"{run}/logs/loopback-*.log") + glob.glob(f"{run}/logs/codec.log") + glob.glob(f"{run}/loopback.txt") + glob.glob(f"{run}/codec.txt")
    for f in files:
        for line in open(f):
            if not line.startswith("Benchmark"):
                continue
            name = re.sub(r"-\d+$", "", line.split()[0])
            m = re.search(r"([\d.]+) ns/key", line)
            w = re.search(r"([\d.]+) wireB/key", line)
            if m:
                r[name].append((float(m.group(1)), w.group(1) if w else ""))
    for k in sorted(r):
        v = [x for x, _ in r[k]]
        print(f"{k:90s} {min(v):7.1f}-{max(v):7.1f} ns/key (x{len(v)}) {r[k][0][1] and r[k][0][1]+' wireB/key'}")
    rem = collections.defaultdict(list)
    for f in sorted(glob.glob(f"{run}/logs/remote*-[0-9].json")):
        v = "prev" if "-prev-" in f else "head"
        for x in json.load(open(f))["results"]:
            rem[(x["dir"], x["size"], v)].append(x["ratio"])
    for (d, s, v) in sorted(rem):
        xs = rem[(d, s, v)]
        print(f"go-remote {d} {s//1024:5d} KiB {v}: {min(xs):.3f}-{max(xs):.3f} (x{len(xs)})")
