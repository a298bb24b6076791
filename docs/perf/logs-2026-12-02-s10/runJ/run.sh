#!/usr/bin/env bash
# Session 10 run J: the session's final code (the commit named in the
# README). internal/cuda's real-driver tests (KVFABRIC_GPU_TESTS=1, the new
# TestGPUPointerMemoryTypesRanges among them); the bench on every path x1;
# nativeprobe.py x1. Every round verified.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric "$D"/*.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
(cd internal/cuda && KVFABRIC_GPU_TESTS=1 st gputests "$D/cuda.test" -test.v -test.count 1)
st bench "$D/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/bench.json"
PYTHONPATH=$PWD/python st native python3 "$D/nativeprobe.py" final 0
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
