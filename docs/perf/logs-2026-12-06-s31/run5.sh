#!/usr/bin/env bash
# Session 31 run 5 (build3.sh's .device, rebuilt at HEAD): does the garbage
# collector bound the small remote puts and gets? go-remote 4-64 KiB with
# GOGC unset (100), 400 and off for the bench and its `kvfabric master`
# child (which inherits the environment), x3 interleaved.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 240 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
for rep in 1 2 3; do
  for g in 100 400 off; do
    GOGC=$g st gc$g-$rep "$D/kvfabric" bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB --json "$L/gc$g-$rep.json"
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/gc*-?.log; do echo "== $(basename $f .log)"; grep -E "go-remote +(put|get)" "$f" | awk '{print $3, $4, $10, "meta", $13, "master", $17, "end", $19}'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
