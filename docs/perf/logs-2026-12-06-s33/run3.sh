#!/usr/bin/env bash
# Session 33 run 3 (build3.sh's .device): chunks counting copy-engine
# regions (head) against chunks counting every region (all):
# scripts/multi-buffers.py layouts A (32 x 32 KiB regions a key) and B
# (28 x 16 KiB), SM-kernel regions both, and python-multi at 256 KiB -
# 4 MiB, x3 interleaved.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*/*.xz
chmod +x .device/*/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export PYTHONPATH=$PWD/python
A="--layers 32 --region 32768 --keys 128"
B="--layers 28 --region 16384 --keys 256"
for rep in 1 2 3; do
  for v in head all; do
    st multi-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so KVFABRIC_BIN=$D/$v/kvfabric "$D/$v/kvfabric" bench --store --driver cuda --paths python-multi --sizes 256KiB,1MiB,4MiB --json "$L/multi-$v-$rep.json"
    st mbA-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so python3 scripts/multi-buffers.py $A --rounds 6 --modes multi
    st mbB-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so python3 scripts/multi-buffers.py $B --rounds 6 --modes multi
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/multi-*.log; do echo "== $(basename $f .log) $(grep -E '^ +1gpu' "$f" | awk '{print $3, $4, $10}' | paste -sd' ')"; done
for f in "$L"/mb*.log; do echo "== $(basename $f .log) $(grep -E '^multi (put|get):' "$f" | sed -E 's/us per call \(min\/median\/max\); //' | paste -sd' ')"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
