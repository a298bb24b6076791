#!/usr/bin/env bash
# Session 17 run I: 2935b4e (put streams from 2048 keys). pyprobe17.py x2
# (the stream step by step, piece sizes, raw ABI call); bench --store
# python and go-embedded 16 KiB-1 MiB x2 interleaved.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*.xz
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for rep in 1 2; do
  mkdir -p /tmp/pp17-$rep; st probe-$rep env SOCKDIR=/tmp/pp17-$rep python3 "$D/pyprobe17.py" r$rep 8
done
S="--sizes 16KiB,64KiB,256KiB,1MiB"
for rep in 1 2; do
  st py-$rep "$D/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-$rep.json"
  st emb-$rep "$D/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$rep.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
