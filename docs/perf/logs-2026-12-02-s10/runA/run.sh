#!/usr/bin/env bash
# Session 10 run A (code: 4592d49 plus two experiment switches that were not
# committed: KVFABRIC_CABI_OFFLOAD=1 ran the C ABI's BatchPut/BatchGet store
# call on a fresh goroutine instead of the cgo callback's thread-locked one;
# KVFABRIC_EVENT_BLOCKING=1 created the transfer engine's events with
# CU_EVENT_BLOCKING_SYNC). Where the python path's time goes (pyprobe:
# marshal, C call with prebuilt args, facade call) with offload 0 or 1; the
# bench's go-embedded and python paths for reference; go-embedded with
# blocking-sync events.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name\|thread\|socket" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for r in 1 2; do
  for o in 0 1; do
    KVFABRIC_CABI_OFFLOAD=$o PYTHONPATH=$PWD/python st probe-o$o-$r python3 "$D/pyprobe.py" o$o
  done
  st b-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/b-$r.json"
  KVFABRIC_CABI_OFFLOAD=1 st bo-$r "$D/kvfabric" bench --store --driver cuda --paths python --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/bo-$r.json"
  KVFABRIC_EVENT_BLOCKING=1 st bb-$r "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB --json "$L/bb-$r.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
