#!/usr/bin/env bash
# Device batch J (session 8, the working tree on 0229195): put timelines
# (--gpu-times) of 64 KiB and 16 KiB batches of 4096 and 256 keys.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
gunzip -f "$D"/kvfabric.gz; chmod +x "$D"/kvfabric
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 120 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
B="$D/kvfabric bench --store --driver cuda --gpu-times --paths go-embedded,go-remote --sizes 16KiB,64KiB"
st tl4096 $B --json "$L/tl4096.json"
st tl256 $B --max-keys 256 --json "$L/tl256.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
