#!/usr/bin/env bash
# Session 10 run D: (1) the C ABI's batch decoding on the host CPU,
# BenchmarkDecodeBatch of 4592d49 (old: key arrays, count array) and of
# 84b70a8 (new: keys=arrays|packed, one region per key without counts), x3
# interleaved; (2) the python path of 874a9fb (prev: parts as an array of
# ones) against 84b70a8 (new: parts NULL), same script, each call with the
# go-embedded path, x3 interleaved; (3) the final code on every path
# (go-embedded, go-remote, python) x2; (4) go-embedded with 8 batch parts
# of 512 keys (--batch-parts 8 --pipeline-chunk 256) x2: what more cores
# would buy small gets. Every bench round verified.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric "$D"/*.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="4KiB,16KiB,64KiB,256KiB,1MiB"
for r in 1 2 3; do
  st dec-old-$r "$D/cabi-old.test" -test.run '^$' -test.bench BenchmarkDecodeBatch -test.benchtime 2000x -test.count 3
  st dec-new-$r "$D/cabi-new.test" -test.run '^$' -test.bench BenchmarkDecodeBatch -test.benchtime 2000x -test.count 3
done
for r in 1 2 3; do
  KVFABRIC_LIB=$D/libkvfabric-prev.so st prev-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --python-script "$D/prev/scripts/bench-store.py" --sizes $S --json "$L/prev-$r.json"
  KVFABRIC_LIB=$D/libkvfabric.so st new-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/new-$r.json"
done
for r in 1 2; do
  KVFABRIC_LIB=$D/libkvfabric.so st final-$r "$D/kvfabric" bench --store --driver cuda --sizes $S --json "$L/final-$r.json"
  st parts8-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded --batch-parts 8 --pipeline-chunk 256 --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/parts8-$r.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
