#!/usr/bin/env bash
# Session 13 run F: is the python 64 KiB get of the new code lower, or is
# it the order the variants ran in? cur = d603f77, memo = 5157db7; python
# 16-256 KiB, x6, the order alternating (cur first, then memo first).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for rep in 1 2 3 4 5 6; do
  order="cur memo"; [ $((rep % 2)) -eq 0 ] && order="memo cur"
  for v in $order; do
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda --sizes 16KiB,64KiB,256KiB --paths python --json "$L/py-$v-$rep.json"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
