#!/usr/bin/env bash
# Session 14 run D: the python path, hash = eb3bdde against uni = 395a7c4 (run C's
# code), 4-64 KiB x4 with the order alternating (run C ran hash first
# every time and showed uni lower); go-remote x2 (uni does not change it).
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
py() { st py-$1-$2 env KVFABRIC_LIB=$D/$1/libkvfabric.so "$D/$1/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths python --json "$L/py-$1-$2.json"; }
py hash 1; py uni 1; py uni 2; py hash 2; py hash 3; py uni 3; py uni 4; py hash 4
for rep in 1 2; do
  for v in hash uni; do
    st rem-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB --paths go-remote --json "$L/rem-$v-$rep.json"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
