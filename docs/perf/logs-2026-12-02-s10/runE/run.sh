#!/usr/bin/env bash
# Session 10 run E: does the Go garbage collector inside the Python
# process (libkvfabric.so's runtime, whose heap is only the Store's) slow
# the python path's batches? The python path (final code, 84b70a8) with
# GOGC unset (100), 400 and off, x2 interleaved, each call with the
# go-embedded path; then one call of each path with GODEBUG=gctrace=1 to
# count the collections.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="4KiB,16KiB,64KiB,256KiB,1MiB"
for r in 1 2; do
  st gc100-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/gc100-$r.json"
  GOGC=400 st gc400-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/gc400-$r.json"
  GOGC=off st gcoff-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/gcoff-$r.json"
done
# the script alone (no lockstep), as the bench starts it, so that its
# stderr (the library's gctrace) is kept
mkdir -p /tmp/kvf-sock
CFG='{"device":0,"driver":"cuda","mode":"1gpu","sizes":[65536],"round_bytes":268435456,"iters":3,"max_keys":4096,"capacity":536870912,"max_mr":268435456,"socket_dir":"/tmp/kvf-sock","lockstep":false}'
GODEBUG=gctrace=1 PYTHONPATH=$PWD/python st trace-py python3 scripts/bench-store.py "$CFG"
GODEBUG=gctrace=1 st trace-go "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 64KiB --json "$L/trace-go.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
