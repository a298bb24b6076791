#!/usr/bin/env bash
# Session 10 run B: the python path with packed keys. Variants, one process
# each, interleaved, every round verified:
#   old = 4592d49's Python package, library and bench-store.py
#   mix = the new package and library with 4592d49's bench-store.py
#   new = the new package, library and script (with the go-embedded path
#         in the same call, for the Go API's ratio)
# and pyprobe (marshal / C call / facade per batch) on the new code.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="4KiB,16KiB,64KiB,256KiB,1MiB"
for r in 1 2 3; do
  KVFABRIC_LIB=$D/libkvfabric-old.so st old-$r "$D/kvfabric" bench --store --driver cuda --paths python --python-script "$D/old/scripts/bench-store.py" --sizes $S --json "$L/old-$r.json"
  KVFABRIC_LIB=$D/libkvfabric.so st mix-$r "$D/kvfabric" bench --store --driver cuda --paths python --python-script "$D/mix/scripts/bench-store.py" --sizes $S --json "$L/mix-$r.json"
  KVFABRIC_LIB=$D/libkvfabric.so st new-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/new-$r.json"
done
for r in 1 2; do
  KVFABRIC_LIB=$D/libkvfabric.so PYTHONPATH=$PWD/python st probe-$r python3 "$D/pyprobe.py" new
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
