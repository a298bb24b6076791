#!/usr/bin/env bash
# Session 26 run 6 (build4.sh at f741182; carry [".device"]), on whatever
# machine comes: BenchmarkPutRounds, then go-embedded at every size x2
# (each run reports the master put path alone per size), then 4-16 KiB
# with --gpu-times x2: does the small put follow the master's bound
# from host to host?
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
lscpu > "$L/lscpu.txt" 2>&1
(cd internal/master && st putrounds ../../.device/master.test -test.run XXX -test.bench 'BenchmarkPutRounds/live=0/size=4096/prep=uniform' -test.benchtime 300x -test.count 3)
for rep in 1 2; do
  st emb-$rep $K bench --store --driver cuda --paths go-embedded --json "$L/emb-$rep.json"
  st gt-$rep $K bench --store --driver cuda --paths go-embedded --gpu-times --sizes 4KiB,16KiB --json "$L/gt-$rep.json"
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -hE "^Benchmark" "$L"/putrounds.log | sed 's/ *\t */ /g'; grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'
for f in "$L"/emb-*.log "$L"/gt-*.log; do echo "== $(basename $f)"; grep -E "^\s+1gpu.*put\s+(4|16)KiB" "$f"; sed -n '/master put path alone/,/16KiB/p' "$f"; done
grep -m1 "GPU UUID" "$L/nvidia-smi.log"; grep "Model name" "$L/lscpu.txt"
