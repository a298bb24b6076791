#!/usr/bin/env bash
# Session 10 run G (84b70a8 plus two uncommitted experiment switches):
# does a caller goroutine locked to its thread — what a cgo callback from
# Python is — slow the Store's batches? go-embedded with the bench's
# goroutine locked (KVFABRIC_EXP_LOCK=1, runtime.LockOSThread) against
# unlocked; the python path with the C ABI's Store call on the callback's
# locked goroutine (o0) against a fresh one (KVFABRIC_CABI_OFFLOAD=1, o1);
# x3 interleaved, every round verified.
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
  st go-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes $S --json "$L/go-$r.json"
  KVFABRIC_EXP_LOCK=1 st golock-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes $S --json "$L/golock-$r.json"
  st o0-$r "$D/kvfabric" bench --store --driver cuda --paths python --sizes $S --json "$L/o0-$r.json"
  KVFABRIC_CABI_OFFLOAD=1 st o1-$r "$D/kvfabric" bench --store --driver cuda --paths python --sizes $S --json "$L/o1-$r.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
