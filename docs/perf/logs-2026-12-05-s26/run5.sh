#!/usr/bin/env bash
# Session 26 run 5 (build4.sh at f741182, which reports the master put path): the goals table (every path and size, x3) with the
# host's CPU named (lscpu) and timed on the master's own put path
# (BenchmarkPutRounds, before and after the table), so that runs on
# different machines can be told apart by their CPU.
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
(cd internal/master && st putrounds-after ../../.device/master.test -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -hE "^Benchmark" "$L"/putrounds-*.log | sed 's/ *\t */ /g'; grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'; grep -m1 "GPU UUID" "$L/nvidia-smi.log"; grep "Model name" "$L/lscpu.txt"
