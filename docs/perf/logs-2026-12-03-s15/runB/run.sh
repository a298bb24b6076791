#!/usr/bin/env bash
# Session 15 run B: is it the Go GC or the locked C thread?
# base = fa2547e; lock/kvfabric = base + KVF_LOCK=1 locks each GPU's bench
# goroutine to its OS thread (runtime.LockOSThread at the top of the
# goroutine in storeGoPath; as a C thread's call into Go is locked).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 16KiB,64KiB"
for rep in 1 2; do
  st emb-free-$rep "$D/lock/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-free-$rep.json"
  st emb-lock-$rep env KVF_LOCK=1 "$D/lock/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-lock-$rep.json"
done
st emb-gctrace env GODEBUG=gctrace=1 "$D/base/kvfabric" bench --store --driver cuda $S --paths go-embedded
probe() { local n=$1; shift; mkdir -p /tmp/pps-$n; st probe-$n env "$@" KVFABRIC_LIB=$D/base/libkvfabric.so SOCKDIR=/tmp/pps-$n python3 "$D/pyprobe.py" $n 8; }
probe gcdef-1 X=1; probe gc400-1 GOGC=400; probe gcoff-1 GOGC=off; probe gctrace GODEBUG=gctrace=1
probe gcoff-2 GOGC=off; probe gcdef-2 X=1
for rep in 1 2; do
  st py-gcdef-$rep env KVFABRIC_LIB=$D/base/libkvfabric.so "$D/base/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-gcdef-$rep.json"
  st py-gcoff-$rep env GOGC=off KVFABRIC_LIB=$D/base/libkvfabric.so "$D/base/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-gcoff-$rep.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
