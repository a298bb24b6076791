#!/usr/bin/env bash
# Session 13 run D: the copy-engine crossover per direction. b268f5f's
# bench --store, go-embedded and go-remote at 64 and 128 KiB, the default
# route (copy engine from 128 KiB) against --copy-engine-min 64KiB, x4
# interleaved (remote x2).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
K=$D/cur/kvfabric
for rep in 1 2 3 4; do
  st emb-def-$rep $K bench --store --driver cuda --sizes 64KiB,128KiB --paths go-embedded --json "$L/emb-def-$rep.json"
  st emb-ce64-$rep $K bench --store --driver cuda --sizes 64KiB,128KiB --paths go-embedded --copy-engine-min 64KiB --json "$L/emb-ce64-$rep.json"
done
for rep in 1 2; do
  st rem-def-$rep $K bench --store --driver cuda --sizes 64KiB,128KiB --paths go-remote --json "$L/rem-def-$rep.json"
  st rem-ce64-$rep $K bench --store --driver cuda --sizes 64KiB,128KiB --paths go-remote --copy-engine-min 64KiB --json "$L/rem-ce64-$rep.json"
done
st tl-ce64 $K bench --store --driver cuda --sizes 64KiB --paths go-embedded --copy-engine-min 64KiB --gpu-times --json "$L/tl-ce64.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
