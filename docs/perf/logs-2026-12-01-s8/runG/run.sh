#!/usr/bin/env bash
# Device batch G (session 8): requests built chunk by chunk (new, 542b10e)
# against dcea406 (old), interleaved, --gpu-times.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric-*
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for r in 1 2 3; do for v in old new; do
  st b4k-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --gpu-times --paths go-embedded,go-remote --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/b4k-$v-$r.json"
  st b1k-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --gpu-times --paths go-embedded --sizes 16KiB,64KiB --max-keys 1024 --json "$L/b1k-$v-$r.json"
done; done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
