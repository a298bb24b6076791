"""Min-max over the sweeps of each (direction, block size, variant) median
in run1/probe.log and run2/probe-hybrid.log: the ranges the docs quote.
Usage: python3 summary.py > summary.txt"""
import collections
import re

for f in ("run1/probe.log", "run2/probe-hybrid.log"):
    rows = collections.defaultdict(list)
    for line in open(f):
        m = re.match(r"sweep=\d dir=(\w+) size=(\d+)KiB variant=(\S+)\s+gbps=([\d.]+).* ratio=([\d.]+)", line)
        if m:
            rows[(m[1], int(m[2]), m[3])].append((float(m[4]), float(m[5])))
    print(f"== {f}: GB/s and ratio, min-max over {max(len(v) for v in rows.values())} sweeps")
    per = collections.defaultdict(list)
    for (d, size, v), xs in sorted(rows.items()):
        per[(d, v)] += xs
        print(f"{d:3} {size:4} KiB {v:14} {min(x[0] for x in xs):6.2f}-{max(x[0] for x in xs):6.2f}"
              f"  {min(x[1] for x in xs):.3f}-{max(x[1] for x in xs):.3f}")
    print("-- every size")
    for (d, v), xs in sorted(per.items()):
        print(f"{d:3} {v:14} {min(x[0] for x in xs):6.2f}-{max(x[0] for x in xs):6.2f}"
              f"  {min(x[1] for x in xs):.3f}-{max(x[1] for x in xs):.3f}")
    for line in open(f):
        if "ceiling" in line:
            print(line.rstrip())
