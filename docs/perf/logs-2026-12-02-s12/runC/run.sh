#!/usr/bin/env bash
# Session 12 run C: the put path's changes against the code before.
# old = b39a717; ends = 5b0448f (+ the embedded pipeline's PutEnds on its
# worker: client); new = 7005f28 (+ the placement plan per run of puts,
# master, and the allocator's in-place split). go-embedded 4 KiB-1 MiB and
# python 64 KiB-1 MiB, three interleaved reps; the master benchmarks on
# the host CPU for old and new, interleaved.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric "$D"/*/master.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for rep in 1 2 3; do
  for v in old ends new; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
  for v in old new; do
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda --sizes 64KiB,256KiB,1MiB --paths python --json "$L/py-$v-$rep.json"
  done
done
for rep in 1 2; do for v in old new; do
  st mbench-$v-$rep "$D/$v/master.test" -test.run '^$' -test.bench 'BenchmarkPutRounds|BenchmarkPutFull' -test.count 2
done; done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
