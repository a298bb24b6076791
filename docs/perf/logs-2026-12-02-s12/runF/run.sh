#!/usr/bin/env bash
# Session 12 run F: the session's code against the code before it, every
# path. old = b39a717, new = 0f84945. go-embedded, go-remote and python,
# 4 KiB-1 MiB, three interleaved reps; then a CPU profile of new's
# embedded 4 KiB round trips (8 rounds) and BenchmarkGet (embedded) on the
# host CPU.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric "$D"/new/master.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB"
for rep in 1 2 3; do
  for v in old new; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
    st rem-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-remote --json "$L/rem-$v-$rep.json"
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-$v-$rep.json"
  done
done
st prof4k "$D/new/kvfabric" bench --store --driver cuda --sizes 4KiB --paths go-embedded --iters 8 --cpuprofile "$L/prof4k.pprof" --json "$L/prof4k.json"
st mget "$D/new/master.test" -test.run '^$' -test.bench 'BenchmarkGet$/embedded' -test.count 2 -test.cpuprofile "$L/mget.pprof"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
