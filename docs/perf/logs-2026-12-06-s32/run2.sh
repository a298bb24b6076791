#!/usr/bin/env bash
# Session 32 run 2 (build1.sh's .device; the reverted head's Python from the
# tree): where vLLM's multi-buffer calls stand now. scripts/multi-buffers.py
# (with the Store's phase split per key) on layouts A (128 keys x 64 x 32
# KiB), B (256 x 56 x 16 KiB), C (16 x 64 x 32 KiB), x2; the transfer
# engine alone at 16 KiB, 32 KiB and 2 MiB blocks; go-embedded at 4 KiB.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"; git log --oneline -1 >> "$L/version.txt"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric PYTHONPATH=$PWD/python
A="--layers 32 --region 32768 --keys 128"
B="--layers 28 --region 16384 --keys 256"
C="--layers 32 --region 32768 --keys 16"
for rep in 1 2; do
  for lay in A B C; do
    args=${!lay}
    st mb-$lay-$rep python3 scripts/multi-buffers.py $args --rounds 8
  done
  pack
done
st te "$D"/kvfabric bench --driver cuda --sizes 16KiB,32KiB,2MiB
st emb4k "$D"/kvfabric bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB --json "$L/emb4k.json"
pack
cat "$L/summary.txt"
for f in "$L"/mb-*.log; do echo "== $(basename $f .log)"; grep -E "^(multi|flat) |^layout" "$f"; done
grep -E "KiB|MiB" "$L/te.log" | tail -8
grep -E "1gpu +go-embedded" "$L/emb4k.log"
grep -m1 "Product Name" "$L/nvidia-smi.log"
