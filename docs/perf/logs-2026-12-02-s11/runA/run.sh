#!/usr/bin/env bash
# Session 11 run A: the copy kernel's launch shape (KVF_EXP_SLICE bytes per
# CTA slice, KVF_EXP_WANTCTAS CTAs wanted; kvfabric-exp only, a build with
# those two read from the environment) against the committed code
# (kvfabric, 5160f34: slice 64 KiB, 2048 CTAs), go-embedded 16 and 64 KiB
# with --gpu-times, two interleaved reps; then a CPU profile of a 4 KiB
# embedded put run.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric*
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 120 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
B="bench --store --driver cuda --paths go-embedded --gpu-times"
for rep in 1 2; do
  st base-$rep "$D/kvfabric" $B --sizes 16KiB,64KiB --json "$L/base-$rep.json"
  for cfg in 32768:2048 16384:2048 8192:4096 16384:8192; do
    s=${cfg%:*}; w=${cfg#*:}
    KVF_EXP_SLICE=$s KVF_EXP_WANTCTAS=$w st exp-$s-$w-$rep "$D/kvfabric-exp" $B --sizes 16KiB,64KiB --json "$L/exp-$s-$w-$rep.json"
  done
done
st prof4k "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 4KiB --cpuprofile "$L/prof4k.pprof" --json "$L/prof4k.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
