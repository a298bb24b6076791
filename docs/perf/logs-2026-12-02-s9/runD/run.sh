#!/usr/bin/env bash
# Device batch D (session 9): new = 641ec30 (ender, record layout, placement
# slack with the full-store re-key, chunks built ahead) against 62ce609
# (old), interleaved, every round verified: the bench x3, a full store
# (--prefill) x2; --gpu-times once each.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric-*
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for r in 1 2 3; do for v in old new; do
  KVFABRIC_LIB=$D/libkvfabric-$v.so st b-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/b-$v-$r.json"
  [ $r -le 2 ] && st p-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --prefill --paths go-embedded,go-remote --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/p-$v-$r.json"
done; done
for v in old new; do
  st g-$v "$D/kvfabric-$v" bench --store --driver cuda --gpu-times --paths go-embedded --sizes 4KiB,16KiB,64KiB --json "$L/g-$v.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
