#!/usr/bin/env bash
# Session 26 run 3: where an embedded 4 KiB put's master time goes on the
# lab host. The master alone (BenchmarkPutRounds x3, the Store's chunks,
# no GPU) against the same work inside `bench --store` (go-embedded,
# --gpu-times, x2 with a CPU profile of the whole process, the first with
# an execution trace too).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/kvfabric.xz .device/master.test.xz
chmod +x .device/kvfabric .device/master.test
K=$PWD/.device/kvfabric
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
nproc > "$L/nproc.txt"; lscpu > "$L/lscpu.txt" 2>&1
(cd internal/master && st putrounds ../../.device/master.test -test.run XXX -test.bench 'BenchmarkPutRounds/live=(0|1000000)/size=4096/prep=uniform' -test.benchtime 300x -test.count 3)
st prof-1 $K bench --store --driver cuda --paths go-embedded --gpu-times --sizes 4KiB --cpuprofile "$L/prof-1.cpu" --trace "$L/prof-1.trace" --json "$L/prof-1.json"
st prof-2 $K bench --store --driver cuda --paths go-embedded --gpu-times --sizes 4KiB --cpuprofile "$L/prof-2.cpu" --json "$L/prof-2.json"
ls -la "$L" > "$L/files.txt"
pack
cat "$L/summary.txt"; grep -E "^Benchmark" "$L/putrounds.log"; grep -E "^\s+1gpu" "$L"/prof-*.log; grep -m1 "GPU UUID" "$L/nvidia-smi.log"; ls -la "$OUT"
