#!/usr/bin/env bash
# Session 13 run C: cur = d603f77, prep = c088f31 (PutEnd hints, PutStart
# prepared apart), bld = 6db3284 (+ a builder goroutine builds the chunks).
# go-embedded 4-256 KiB x4 and python 4-64 KiB x3, interleaved; go-remote
# 4-256 KiB x2 for cur and bld; one --gpu-times run of bld.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for rep in 1 2 3 4; do
  for v in cur prep bld; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB --paths go-embedded --json "$L/emb-$v-$rep.json"
    if [ $rep -le 3 ]; then
      st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths python --json "$L/py-$v-$rep.json"
    fi
  done
done
for rep in 1 2; do
  for v in cur bld; do
    st rem-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB --paths go-remote --json "$L/rem-$v-$rep.json"
  done
done
st tl-bld "$D/bld/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --gpu-times --json "$L/tl-bld.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
