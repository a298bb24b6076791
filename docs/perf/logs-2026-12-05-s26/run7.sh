#!/usr/bin/env bash
# Session 26 run 7 (build4.sh at f741182; carry [".device"]): does the
# garbage collector cost the small embedded put? go-embedded 4-64 KiB
# with --gpu-times, GOGC default and GOGC=off interleaved x3, and
# BenchmarkPutRounds for the machine's speed.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/*.xz
chmod +x .device/kvfabric .device/master.test
K=$PWD/.device/kvfabric
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
(cd internal/master && st putrounds ../../.device/master.test -test.run XXX -test.bench 'BenchmarkPutRounds/live=0/size=4096/prep=uniform' -test.benchtime 300x -test.count 3)
for rep in 1 2 3; do
  st gc-on-$rep $K bench --store --driver cuda --paths go-embedded --gpu-times --sizes 4KiB,16KiB,64KiB --json "$L/gc-on-$rep.json"
  st gc-off-$rep env GOGC=off $K bench --store --driver cuda --paths go-embedded --gpu-times --sizes 4KiB,16KiB,64KiB --json "$L/gc-off-$rep.json"
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -hE "^Benchmark" "$L"/putrounds.log | sed 's/ *\t */ /g'; grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'
for f in "$L"/gc-*.log; do echo "== $(basename $f)"; grep -E "^\s+1gpu.*put\s+4KiB" "$f"; done
grep -m1 "GPU UUID" "$L/nvidia-smi.log"
