#!/usr/bin/env bash
# Device batch F (session 8, code dcea406): what leaves the GPU idle in a
# 64 KiB put batch: GC (GOGC=off), batch size (ramp and tail per batch).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
[ -f "$D"/kvfabric.gz ] && gunzip -f "$D"/kvfabric.gz; chmod +x "$D"/kvfabric
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
B="$D/kvfabric bench --store --driver cuda --gpu-times --paths go-embedded"
for r in 1 2; do
  st base-$r $B --sizes 4KiB,16KiB,64KiB --json "$L/base-$r.json"
  GOGC=off st gcoff-$r $B --sizes 4KiB,16KiB,64KiB --json "$L/gcoff-$r.json"
  st keys16k-$r $B --sizes 64KiB --bytes 1GiB --max-keys 16384 --json "$L/keys16k-$r.json"
  st keys1k-$r $B --sizes 64KiB --max-keys 1024 --json "$L/keys1k-$r.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
