#!/usr/bin/env bash
# Session 12 run I: a single-pipeline put checks each chunk's buffers as
# it reaches it (lazyPuts) instead of the whole batch's before the first
# master call. old = 1916342, new = 6d4b456 (the lazy checks; built from
# the working tree, committed after this run). go-embedded and python,
# 4-64 KiB, four
# interleaved reps.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 4KiB,16KiB,64KiB"
for rep in 1 2 3 4; do
  for v in old new; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-$v-$rep.json"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
