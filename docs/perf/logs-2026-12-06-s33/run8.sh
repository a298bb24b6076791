#!/usr/bin/env bash
# Session 33 run 8 (build6.sh's .device, 7b2b049: the session's final
# library code): the goals table once more on whatever host comes — every
# path (python-multi too) at 4 KiB - 16 MiB, x2, a plot of the first.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*/*.xz
chmod +x .device/*/kvfabric
D=$PWD/.device/head
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 250 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric
for rep in 1 2; do
  plot=""; [ $rep = 1 ] && plot="--plot $L/all-1.svg"
  st all-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded,go-remote,python,python-multi --json "$L/all-$rep.json" $plot
  pack
done
cat "$L/summary.txt"
for f in "$L"/all-?.log; do echo "== $(basename $f .log)"; grep -E "^ +1gpu" "$f" | awk '{print $2, $3, $4, $10}' | paste -sd' ' | fold -w 400; grep -A2 "master put path" "$f" | tail -2; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
