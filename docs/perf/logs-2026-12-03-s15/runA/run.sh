#!/usr/bin/env bash
# Session 15 run A: where the python facade's batch time goes.
# base = fa2547e (HEAD), off = base + cabi's batch put/get run on a goroutine
# of their own (offThread). pyprobe.py: facade vs raw C calls (16, 64 KiB,
# 4096 keys, 8 rounds each, verified), Python conversions, 1/16-key latency.
# Reference: go-embedded and the python path of bench --store, 16-64 KiB.
# (pyprobe.py of this run: ../pyprobe.py without the steps mode, the page
# fault counts and the sim switch, which came with run D.)
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/base/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; python3 -c 'import torch; print(torch.__version__)' >> "$L/env.txt" 2>&1
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
probe() { mkdir -p /tmp/pps-$1-$2; st probe-$1-$2 env KVFABRIC_LIB=$D/$1/libkvfabric.so SOCKDIR=/tmp/pps-$1-$2 python3 "$D/pyprobe.py" $1 8; }
probe base 1; probe off 1; probe off 2; probe base 2
st emb-1 "$D/base/kvfabric" bench --store --driver cuda --sizes 16KiB,64KiB --paths go-embedded --json "$L/emb-1.json"
for v in base off; do
  st py-$v-1 env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/base/kvfabric" bench --store --driver cuda --sizes 16KiB,64KiB --paths python --json "$L/py-$v-1.json"
done
st emb-2 "$D/base/kvfabric" bench --store --driver cuda --sizes 16KiB,64KiB --paths go-embedded --json "$L/emb-2.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
