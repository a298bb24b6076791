#!/usr/bin/env bash
# Session 15 run C: the python facade's own cost per batch, old against new.
# pyold = the python package of fa2547e (with scripts/bench-store.py beside
# it); new = 41fd324's python/ (packed keys passed as the joined str's UTF-8
# bytes, statuses checked by one compare of their bytes). Both on
# base/libkvfabric.so (fa2547e). python path 16-256 KiB x3 alternating;
# pyprobe facade/raw with each; go-embedded x2 for reference; cabi.test
# BenchmarkDecodeBatch (this CPU).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/base/kvfabric "$D"/mb/cabi.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
NEW=$PWD/python; OLD=$D/pyold/python
S="--sizes 16KiB,64KiB,256KiB"
# the bench puts <script>/../../python first on PYTHONPATH
py() { st py-$1-$2 env KVFABRIC_LIB=$D/base/libkvfabric.so "$D/base/kvfabric" bench --store --driver cuda $S --paths python --python-script $3 --json "$L/py-$1-$2.json"; }
SO=$D/pyold/scripts/bench-store.py; SN=$PWD/scripts/bench-store.py
py old 1 $SO; py new 1 $SN; py new 2 $SN; py old 2 $SO; py old 3 $SO; py new 3 $SN
probe() { mkdir -p /tmp/pps-$1; st probe-$1 env PYTHONPATH=$2 KVFABRIC_LIB=$D/base/libkvfabric.so SOCKDIR=/tmp/pps-$1 python3 "$D/pyprobe.py" $1 8; }
probe old $OLD; probe new $NEW
for rep in 1 2; do
  st emb-$rep "$D/base/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$rep.json"
done
st decode "$D/mb/cabi.test" -test.run xxx -test.bench DecodeBatch -test.benchtime 2000x -test.count 3
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
