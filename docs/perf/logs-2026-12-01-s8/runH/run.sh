#!/usr/bin/env bash
# Device batch H (session 8): with an embedded master the pipeline's chunks
# start at 32 keys and grow by half (new, working tree on 4d0c...) against
# 64 keys doubling (old, HEAD), batches of 256, 1024 and 4096, interleaved.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric-*
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for r in 1 2; do for v in old new; do for k in 256 1024 4096; do
  st k$k-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --gpu-times --paths go-embedded,go-remote --sizes 16KiB,64KiB --max-keys $k --json "$L/k$k-$v-$r.json"
done; done; done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
