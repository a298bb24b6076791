#!/usr/bin/env bash
# Session 28 run 3 (build2.sh's .device, as run 2): does spinning cost the
# batch paths? go-remote 4-64 KiB with the defaults (spin 50us) against
# --fast-spin 0, interleaved x4; then issue 13's goals table with head
# (every path, all sizes, x2), and the host's speed before and after.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz .device/*/*.xz
chmod +x .device/kvfabric .device/*.test .device/prev/kvfabric
D=$PWD/.device K=$PWD/.device/kvfabric
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$K
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
PR='BenchmarkPutRounds/live=0/size=4096/prep=uniform'
(cd internal/master && st putrounds-before "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
for rep in 1 2 3 4; do
  st remote-spin-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB --json "$L/remote-spin-$rep.json"
  st remote-nospin-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB --fast-spin 0 --json "$L/remote-nospin-$rep.json"
done
pack
for rep in 1 2; do
  st all-$rep $K bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-$rep.json"
  pack
done
(cd internal/master && st putrounds-after "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -hE "^Benchmark" "$L"/putrounds-*.log | sed 's/ *\t */ /g'
for f in "$L"/remote-*.log; do grep -E "^  1gpu" "$f" | awk -v f="$(basename $f .log)" '{print f, $2, $3, $4, $10}'; done
grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'
grep -m1 "Product Name" "$L/nvidia-smi.log"; grep "Model name" "$L/host.txt"
