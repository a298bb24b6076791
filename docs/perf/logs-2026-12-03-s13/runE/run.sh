#!/usr/bin/env bash
# Session 13 run E: cur = d603f77 (the session's start), prep = c088f31
# (PutEnd hints, PutStart prepared apart), memo = 5157db7 (+ bestMemo).
# go-embedded 4-256 KiB x4 (cur, prep, memo), python 4-256 KiB x3 (cur,
# memo), interleaved; on the host CPU, the master benchmarks of prep and
# memo x3 interleaved (BenchmarkPutRounds, BenchmarkPutStartSegments:
# item 1), and BenchmarkLoopback of memo x2 (item 3).
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
for rep in 1 2 3 4; do
  for v in cur prep memo; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
  if [ $rep -le 3 ]; then
    for v in cur memo; do
      st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB --paths python --json "$L/py-$v-$rep.json"
    done
  fi
done
for rep in 1 2 3; do
  for v in prep memo; do
    st mbench-$v-$rep "$D/mb/$v.test" -test.run xxx -test.bench 'BenchmarkPutRounds|BenchmarkPutStartSegments' -test.benchtime 300x
  done
done
for rep in 1 2; do
  st loopback-memo-$rep "$D/mb/memo.test" -test.run xxx -test.bench 'BenchmarkLoopback' -test.benchtime 100x
done
st tl-memo "$D/memo/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --gpu-times --json "$L/tl-memo.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
