#!/usr/bin/env bash
# Session 14 run A: memo = 5157db7, hash = eb3bdde (+ BenchmarkPutRounds prep=ahead).
# go-embedded 4-256 KiB x3 interleaved; --gpu-times of both; on the host CPU
# BenchmarkPutRounds alone and with a copy load on the GPU (kvfabric bench
# 16 MiB in the background) x2 interleaved; BenchmarkLoopback PutStart x1.
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
for rep in 1 2 3; do
  for v in memo hash; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
done
for v in memo hash; do
  st tl-$v "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --gpu-times --json "$L/tl-$v.json"
done
MB="-test.run xxx -test.bench BenchmarkPutRounds -test.benchtime 300x"
for rep in 1 2; do
  st mbench-alone-$rep "$D/mb/hash.test" $MB
  ( date +%s.%N; timeout 60 "$D/hash/kvfabric" bench --driver cuda --sizes 16MiB --iters 100000; date +%s.%N ) > "$L/load-$rep.log" 2>&1 &
  lp=$!
  sleep 8
  echo "mbench start $(date +%s.%N)" >> "$L/load-$rep.log.t"
  ( sleep 1.5; nvidia-smi --query-gpu=utilization.gpu,pcie.link.gen.current --format=csv ) >> "$L/load-$rep.log.t" 2>&1 &
  st mbench-dma-$rep "$D/mb/hash.test" $MB
  echo "mbench end $(date +%s.%N)" >> "$L/load-$rep.log.t"
  kill -- $lp 2>/dev/null; pkill -f "kvfabric bench --driver cuda --sizes 16MiB" ; wait $lp 2>/dev/null
done
st loopback-hash "$D/mb/hash.test" -test.run xxx -test.bench 'BenchmarkLoopback/rpc=PutStart' -test.benchtime 100x
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
