#!/usr/bin/env bash
# Session 10 run F: where the python path's extra time at 64 KiB goes on a
# host where it is large. In one call: the bench (go-embedded + python) x2;
# bench-store.py alone (no lockstep, as the bench starts it) under cProfile,
# 64 KiB, 8 timed rounds (Store._flat_call's own time is the C call's); and
# pyprobe.py (the C call alone, the facade call) x1. Final code (84b70a8).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="4KiB,16KiB,64KiB,256KiB,1MiB"
mkdir -p /tmp/kvf-sock
CFG='{"device":0,"driver":"cuda","mode":"1gpu","sizes":[65536],"round_bytes":268435456,"iters":8,"max_keys":4096,"capacity":536870912,"max_mr":268435456,"socket_dir":"/tmp/kvf-sock","lockstep":false}'
st b-1 "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/b-1.json"
PYTHONPATH=$PWD/python st cprof python3 -m cProfile -o "$L/cprof.out" scripts/bench-store.py "$CFG"
PYTHONPATH=$PWD/python python3 -c "import pstats; pstats.Stats('$L/cprof.out').sort_stats('tottime').print_stats(25)" > "$L/cprof-top.txt" 2>&1
PYTHONPATH=$PWD/python st probe python3 "$D/pyprobe.py" new
st b-2 "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/b-2.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
