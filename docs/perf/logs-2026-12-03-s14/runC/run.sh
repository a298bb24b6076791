#!/usr/bin/env bash
# Session 14 run C: hash = eb3bdde, uni = 395a7c4 (the put pipeline's chunks
# prepared as master.UniformPuts + GetReplicas' UTF-8 check on a miss +
# ReleaseLeases' leaseLookup). go-embedded 4 KiB-256 KiB x4 interleaved;
# python 16-256 KiB x2 (hash first each time); --gpu-times of uni;
# BenchmarkPutRounds (inline / ahead / uniform, live 0 / 1M) x2.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric "$D"/mb/*.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 4KiB,16KiB,64KiB,256KiB"
for rep in 1 2 3 4; do
  for v in hash uni; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
done
for rep in 1 2; do
  for v in hash uni; do
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda --sizes 16KiB,64KiB,256KiB --paths python --json "$L/py-$v-$rep.json"
  done
done
st tl-uni "$D/uni/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --gpu-times --json "$L/tl-uni.json"
for rep in 1 2; do
  st mbench-$rep "$D/mb/uni.test" -test.run xxx -test.bench BenchmarkPutRounds -test.benchtime 300x
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
