#!/usr/bin/env bash
# Session 12 run D: is the Python put path's 64 KiB drop in run C (new
# 0.726-0.789 against old 0.791-0.797, three reps) real? old = b39a717,
# ends = 5b0448f (PutEnds on the worker), new = 7005f28 (+ master plan and
# allocator split). python 16 KiB-256 KiB, five interleaved reps, and
# go-embedded at the same sizes, three.
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
S="--sizes 16KiB,64KiB,256KiB"
for rep in 1 2 3 4 5; do
  for v in old ends new; do
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-$v-$rep.json"
    [ $rep -le 3 ] && st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
