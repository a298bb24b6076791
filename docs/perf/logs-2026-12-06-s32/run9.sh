#!/usr/bin/env bash
# Session 32 run 9 (build1.sh's .device at the commit named in
# version.txt): the transfer engine alone at 32 KiB - 2 MiB blocks (random
# slots): where the copy engines catch up with the SM kernel on this host,
# x2.
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
cp .device/version.txt "$L/"
{ nproc; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
for rep in 1 2; do
  st te-$rep "$D"/kvfabric bench --driver cuda --sizes 32KiB,64KiB,128KiB,256KiB,512KiB,1MiB,2MiB
  pack
done
cat "$L/summary.txt"
for f in "$L"/te-*.log; do echo "== $(basename $f .log)"; grep -E "sm-kernel|ce-batch|auto|staged" "$f"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
