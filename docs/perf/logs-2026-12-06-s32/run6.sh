#!/usr/bin/env bash
# Session 32 run 6 (build6.sh's .device): vLLM's multi-buffer calls
# (scripts/multi-buffers.py, layouts A, B, C as run 2) with head's library
# (growFor, no clip for an exact fit) against a99e4fd's, x3 interleaved.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*/*.xz
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export PYTHONPATH=$PWD/python
A="--layers 32 --region 32768 --keys 128"
B="--layers 28 --region 16384 --keys 256"
C="--layers 32 --region 32768 --keys 16"
for rep in 1 2 3; do
  for lay in A B C; do
    for v in head prev; do
      st mb-$lay-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so python3 scripts/multi-buffers.py ${!lay} --rounds 8
    done
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/mb-*.log; do echo "== $(basename $f .log)"; grep -E "^multi (put|get):|^multi (put|get) phases" "$f" | sed -E 's/us per call \(min\/median\/max\); //'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
