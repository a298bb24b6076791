#!/usr/bin/env bash
# Session 11 run B: the pipelines' master calls on one spinning worker
# (new: the working tree after 5160f34, internal/client/handoff.go) against
# a goroutine per call (old: 5160f34). go-embedded 4-256 KiB with
# --gpu-times x3, go-remote x2, python x2; old and new interleaved.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz "$D"/*/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric*
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 4KiB,16KiB,64KiB,256KiB"
for rep in 1 2 3; do
  for v in old new; do
    st emb-$v-$rep "$D/kvfabric-$v" bench --store --driver cuda $S --paths go-embedded --gpu-times --json "$L/emb-$v-$rep.json"
  done
done
for rep in 1 2; do
  for v in old new; do
    st rem-$v-$rep "$D/kvfabric-$v" bench --store --driver cuda $S --paths go-remote --json "$L/rem-$v-$rep.json"
    KVFABRIC_LIB=$D/$v/libkvfabric.so st py-$v-$rep "$D/kvfabric-$v" bench --store --driver cuda $S --paths python --json "$L/py-$v-$rep.json"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
