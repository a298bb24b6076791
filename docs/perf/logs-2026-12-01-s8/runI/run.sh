#!/usr/bin/env bash
# Device batch I (session 8, code 18536fb = the session's end): the full
# bench ×2 (all paths) and --prefill ×2 (Go paths), every round verified.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for r in 1 2; do
  st full-$r "$D/kvfabric" bench --store --driver cuda --json "$L/full-$r.json" --plot "$L/full-$r.svg"
  st prefill-$r "$D/kvfabric" bench --store --driver cuda --prefill --paths go-embedded,go-remote --json "$L/prefill-$r.json"
done
"$D/kvfabric" bench --store --replot "$L/full-2.json" --plot "$L/full-2.png" >> "$L/summary.txt" 2>&1
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
