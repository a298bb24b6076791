#!/usr/bin/env bash
# Session 15 run F: how many parts a remote put should have. cur = 9b08fe8
# (the ceiling measured before and after the rounds). go-remote 16 KiB-16 MiB
# with --batch-parts 1, 2 and the default (4 on 16 cores), x3 interleaved;
# go-embedded once for reference.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/cur/kvfabric
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 16KiB,64KiB,256KiB,1MiB,4MiB,16MiB --iters 5"
for rep in 1 2 3; do
  for p in 1 2 4; do
    st rem-p$p-$rep "$D/cur/kvfabric" bench --store --driver cuda $S --paths go-remote --batch-parts $p --json "$L/rem-p$p-$rep.json"
  done
done
st emb-1 "$D/cur/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-1.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
