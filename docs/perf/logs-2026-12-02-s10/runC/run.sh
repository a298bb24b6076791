#!/usr/bin/env bash
# Session 10 run C: the python path alone on one GPU with the ready/go
# handshake before each timed phase (lock = bench-store.py of 93ed809, which
# always handshakes) and without it (nolock = the script with lockstep,
# which a lone process skips), the same library and package, each call
# with the go-embedded path for the Go API's ratio; interleaved x3, every
# round verified.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="4KiB,16KiB,64KiB,256KiB,1MiB"
for r in 1 2 3; do
  st lock-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --python-script "$D/lock/scripts/bench-store.py" --sizes $S --json "$L/lock-$r.json"
  st nolock-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes $S --json "$L/nolock-$r.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
