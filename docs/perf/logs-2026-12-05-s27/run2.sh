#!/usr/bin/env bash
# Session 27 run 2 (build2.sh; not run: no device was lent in session 27,
# kept for a later session): issue 13's goals table on the code with
# uniform puts — every path and size x3 (go-embedded, go-remote, python),
# one small get's latency x2 (scripts/device-latency.sh: embedded and
# remote master, p50/p99), and the host's speed before and after
# (BenchmarkPutRounds), so the small-put rows can be read against the
# machine's CPU (store.md, twenty-fourth round).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/*.xz
chmod +x .device/kvfabric .device/master.test
K=$PWD/.device/kvfabric
export KVFABRIC_LIB=$PWD/.device/libkvfabric.so
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
lscpu > "$L/lscpu.txt" 2>&1
PR='BenchmarkPutRounds/live=0/size=4096/prep=uniform'
(cd internal/master && st putrounds-before ../../.device/master.test -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
for rep in 1 2 3; do
  st all-$rep $K bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-$rep.json"
  pack
done
for rep in 1 2; do
  mkdir -p "$L/lat$rep"
  OUT=$L/lat$rep st lat-$rep scripts/device-latency.sh
  pack
done
(cd internal/master && st putrounds-after ../../.device/master.test -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -hE "^Benchmark" "$L"/putrounds-*.log | sed 's/ *\t */ /g'; grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'
grep -h "p50" "$L"/lat-*.log | head -40; grep -m1 "Product Name" "$L/nvidia-smi.log"; grep "Model name" "$L/lscpu.txt"
