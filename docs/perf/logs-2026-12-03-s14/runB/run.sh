#!/usr/bin/env bash
# Session 14 run B (hash = eb3bdde's bench --store; s14 = GetReplicas' UTF-8
# check on a miss only + ReleaseLeases' leaseLookup, 4-64 KiB x3 against
# hash): larger pipeline chunks at 64-256 KiB (--pipeline-chunk 512 =
# default / 1024 / 2048, x3 interleaved); embedded puts split in 2 parts
# (--batch-parts 2) against the default (1 part for embedded puts), 4-64
# KiB x2; BenchmarkPutRounds (live=0 / 1M objects) x2; a CPU profile of
# go-embedded 4-16 KiB.
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
K="$D/hash/kvfabric"
for rep in 1 2 3; do
  for c in 512 1024 2048; do
    st chunk$c-$rep "$K" bench --store --driver cuda --sizes 64KiB,128KiB,256KiB --paths go-embedded --pipeline-chunk $c --json "$L/chunk$c-$rep.json"
  done
done
for rep in 1 2; do
  st parts1-$rep "$K" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --json "$L/parts1-$rep.json"
  st parts2-$rep "$K" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --batch-parts 2 --json "$L/parts2-$rep.json"
done
st tl-chunk2048 "$K" bench --store --driver cuda --sizes 64KiB --paths go-embedded --pipeline-chunk 2048 --gpu-times --json "$L/tl-chunk2048.json"
for rep in 1 2 3; do
  for v in hash s14; do
    st get-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --json "$L/get-$v-$rep.json"
  done
done
for rep in 1 2; do
  st mbench-$rep "$D/mb/s14.test" -test.run xxx -test.bench BenchmarkPutRounds -test.benchtime 300x
done
st prof "$K" bench --store --driver cuda --sizes 4KiB,16KiB --paths go-embedded --iters 20 --cpuprofile "$L/cpu.pprof" --json "$L/prof.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
