#!/usr/bin/env bash
# Session 15 run E: how many parts a large get should have, by object size.
# base = fa2547e. go-embedded 16 KiB-1 MiB, 6 timed rounds, with
# --batch-parts 1, 2 and the default (4 on 16 cores), x3 interleaved (the
# put rows of parts 2 split puts too: not the question here).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/base/kvfabric
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 16KiB,64KiB,256KiB,1MiB --iters 6"
for rep in 1 2 3; do
  for p in 1 2 4; do
    st emb-p$p-$rep "$D/base/kvfabric" bench --store --driver cuda $S --paths go-embedded --batch-parts $p --json "$L/emb-p$p-$rep.json"
  done
done
for rep in 1 2; do
  for p in 1 2 4; do
    st rem-p$p-$rep "$D/base/kvfabric" bench --store --driver cuda --sizes 64KiB,256KiB,1MiB --iters 6 --paths go-remote --batch-parts $p --json "$L/rem-p$p-$rep.json"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
