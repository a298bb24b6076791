#!/usr/bin/env bash
# Session 24 run 1 (run1-build.sh first; carry [".device"]). Versions
# interleaved, every round byte-verified, logs packed into
# $OUT/logs.tar.xz (the device returns at most a few files):
#   A. split batches' first chunk: go-remote head (puts and gets) vs puts
#      (puts only) vs prev (b5b06db), 16 KiB-1 MiB, x4 interleaved; a
#      --gpu-times timeline of head and prev at 256 KiB
#   B. the goals table: head, every size, go-embedded, go-remote and
#      python (x3)
#   C. item 4: scripts/device-latency.sh with head's library (x2)
#   D. head's loopback benchmarks on the host CPU (remote PutStart,
#      GetReplicas, PutEnd per key) and BenchmarkPutStartSegments
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/*/*.xz .device/master.test.xz
chmod +x .device/v/*/kvfabric .device/master.test
V=.device/v
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp $V/versions.txt "$L/"
R="--sizes 16KiB,64KiB,256KiB,1MiB --paths go-remote"
for rep in 1 2 3 4; do
  for v in head puts prev; do
    st remote-$v-$rep $V/$v/kvfabric bench --store --driver cuda $R --json "$L/remote-$v-$rep.json"
  done
done
for v in head prev; do
  st tl-remote-256K-$v $V/$v/kvfabric bench --store --driver cuda --sizes 256KiB --paths go-remote --gpu-times
done
for rep in 1 2 3; do
  KVFABRIC_LIB=$PWD/$V/head/libkvfabric.so st all-head-$rep $V/head/kvfabric bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-head-$rep.json"
done
for rep in 1 2; do
  mkdir -p "$L/lat-$rep"
  OUT="$L/lat-$rep" KVFABRIC_LIB=$PWD/$V/head/libkvfabric.so KVFABRIC_BIN=$PWD/$V/head/kvfabric st lat-$rep scripts/device-latency.sh
done
(cd internal/master && st loopback ../../.device/master.test -test.run xxx -test.bench 'BenchmarkLoopbackOneCaller|BenchmarkLoopbackPutEnd|BenchmarkPutStartSegments' -test.benchtime 100x -test.count 2)
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; cat "$L/ranges.txt"
