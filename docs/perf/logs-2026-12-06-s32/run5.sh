#!/usr/bin/env bash
# Session 32 run 5 (build5.sh's .device): embedded-master puts and gets at
# 4 KiB - 256 KiB with the put pipeline's preparer goroutine (head)
# against without (prev), x4 interleaved, one GPU.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz .device/prev/*.xz
chmod +x .device/kvfabric .device/prev/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
for rep in 1 2 3 4; do
  st head-$rep "$D"/kvfabric bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/head-$rep.json"
  st prev-$rep "$D"/prev/kvfabric bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/prev-$rep.json"
  pack
done
cat "$L/summary.txt"
for f in "$L"/head-?.log "$L"/prev-?.log; do echo "== $(basename $f .log)"; grep -E "1gpu +go-embedded +(put|get)" "$f" | awk '{print $3, $4, $10, $12, $13, $14, $15, $16, $17, $18, $19}'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
