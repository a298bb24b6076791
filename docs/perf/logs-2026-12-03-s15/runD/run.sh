#!/usr/bin/env bash
# Session 15 run D: where the facade's time goes inside a real batch.
# base/libkvfabric.so = fa2547e; python = 41fd324's (packed keys as the
# str's UTF-8 bytes, statuses by one compare). pyprobe.py modes facade /
# raw / steps (the facade's steps timed one by one) with the process's minor
# page faults per call; glibc malloc told never to trim or map (MALLOC_*)
# against the default, for the probe and the python path of bench --store;
# scripts/device-latency.sh x2 (item 4).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/base/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python KVFABRIC_LIB=$D/base/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
M="MALLOC_TRIM_THRESHOLD_=4294967295 MALLOC_MMAP_THRESHOLD_=4294967295 MALLOC_TOP_PAD_=268435456"
probe() { local n=$1; shift; mkdir -p /tmp/pps-$n; st probe-$n env "$@" SOCKDIR=/tmp/pps-$n python3 "$D/pyprobe.py" $n 6; }
probe def-1 X=1; probe mal-1 $M; probe def-2 X=1; probe mal-2 $M
S="--sizes 16KiB,64KiB"
for rep in 1 2; do
  st py-def-$rep "$D/base/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-def-$rep.json"
  st py-mal-$rep env $M "$D/base/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-mal-$rep.json"
done
for rep in 1 2; do
  mkdir -p "$L/lat-$rep"; st lat-$rep env OUT="$L/lat-$rep" KVFABRIC_BIN="$D/base/kvfabric" KVFABRIC_LAT_N=2000 bash scripts/device-latency.sh
done
st emb-1 "$D/base/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-1.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
