#!/usr/bin/env bash
# Session 13 run A: the current code (d603f77): put timelines (--gpu-times)
# of go-embedded 4/16/64/256 KiB x3, and item 4's single-get latency
# (scripts/device-latency.sh) x3.
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
for rep in 1 2 3; do
  st emb-cur-$rep "$D/cur/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB --paths go-embedded --gpu-times --json "$L/emb-cur-$rep.json"
  mkdir -p "$L/lat-$rep"
  st lat-$rep env KVFABRIC_LIB=$D/cur/libkvfabric.so KVFABRIC_BIN=$D/cur/kvfabric OUT=$L/lat-$rep bash scripts/device-latency.sh
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
