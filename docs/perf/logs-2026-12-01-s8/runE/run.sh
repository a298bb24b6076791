#!/usr/bin/env bash
# Device batch E (session 8, code 9f...): --gpu-times: is the pipeline
# GPU-bound? Default settings ×2, then pipeline chunk 2048, then puts to the
# copy engine from 64 KiB.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
gunzip -f "$D"/kvfabric.gz; chmod +x "$D"/kvfabric
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
B="$D/kvfabric bench --store --driver cuda --gpu-times --paths go-embedded,go-remote"
for r in 1 2; do st gt-$r $B --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/gt-$r.json"; done
st chunk2048 $B --sizes 64KiB,256KiB --pipeline-chunk 2048 --json "$L/chunk2048.json"
st chunk128 $B --sizes 16KiB,64KiB --pipeline-chunk 128 --json "$L/chunk128.json"
st ce64 $B --sizes 64KiB --copy-engine-min 64KiB --json "$L/ce64.json"
st parts1 $B --sizes 16KiB,64KiB --batch-parts 1 --json "$L/parts1.json"
st prefill "$D/kvfabric" bench --store --driver cuda --gpu-times --prefill --paths go-embedded --sizes 4KiB,64KiB,256KiB --json "$L/prefill.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
