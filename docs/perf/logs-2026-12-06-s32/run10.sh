#!/usr/bin/env bash
# Session 32 run 10 (build10.sh's .device): copy routes calibrated at Open
# (head) against the configured crossovers (prev): go-embedded with
# --scatter (every key one block, none merged) at 64 KiB - 1 MiB, and
# python-multi (objects over 64 buffers: 16, 64, 256 KiB regions) at 1, 4,
# 16 MiB, x2 interleaved; the transfer engine alone beside them.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*/*.xz
chmod +x .device/*/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 280 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export PYTHONPATH=$PWD/python
st te "$D/head/kvfabric" bench --driver cuda --sizes 64KiB,256KiB,1MiB
for rep in 1 2; do
  for v in head prev; do
    st scat-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda --paths go-embedded --scatter --sizes 64KiB,128KiB,256KiB,512KiB,1MiB --json "$L/scat-$v-$rep.json"
    st multi-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so KVFABRIC_BIN=$D/$v/kvfabric "$D/$v/kvfabric" bench --store --driver cuda --paths python-multi --sizes 1MiB,4MiB,16MiB --json "$L/multi-$v-$rep.json"
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/scat-*.log "$L"/multi-*.log; do echo "== $(basename $f .log)"; grep -E "copy engines from|^ +1gpu" "$f" | awk '/copy engines/{print; next}{print $2, $3, $4, $10}'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
