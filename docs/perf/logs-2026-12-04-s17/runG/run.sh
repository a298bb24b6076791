#!/usr/bin/env bash
# Session 17 run G: base = 29911f6, new = the put pipeline's first chunk
# sent to the worker (chunk 1 built while the master answers chunk 0).
# go-embedded 4-256 KiB x5 interleaved; go-remote 64 KiB-1 MiB x3
# interleaved; --gpu-times 64 KiB of both x2.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 4KiB,16KiB,64KiB,256KiB"
for rep in 1 2 3 4 5; do
  for v in base new; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
done
for rep in 1 2 3; do
  for v in base new; do
    st rem-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 64KiB,256KiB,1MiB --paths go-remote --json "$L/rem-$v-$rep.json"
  done
done
for rep in 1 2; do
  for v in base new; do
    st tl-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 64KiB --paths go-embedded --gpu-times --json "$L/tl-$v-$rep.json"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
