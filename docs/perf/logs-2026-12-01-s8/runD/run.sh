#!/usr/bin/env bash
# Device batch D (session 8): master calls ahead (new, c73972c) against
# 74199e0 (old), interleaved old/new.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric-*
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for r in 1 2 3; do for v in old new; do
  st go-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --paths go-embedded,go-remote --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/go-$v-$r.json"
done; done
for r in 1 2; do for v in old new; do
  KVFABRIC_LIB=$D/lib-$v.so st py-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --paths python --sizes 16KiB,64KiB,256KiB --json "$L/py-$v-$r.json"
done; done
for v in old new; do
  st prefill-$v "$D/kvfabric-$v" bench --store --driver cuda --prefill --paths go-embedded --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/prefill-$v.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
