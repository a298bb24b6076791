#!/usr/bin/env bash
# Session 32 run 15 (build1.sh's .device at the commit named in
# version.txt): the goals table — go-embedded, go-remote, python and
# python-multi (objects scattered over min(64, size/4KiB) buffers, vLLM's
# layout) at 4 KiB - 16 MiB, one GPU, x2, with a plot of the first: the
# session's final code (gets split by regions) on another host.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 280 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
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
for f in "$L"/all-?.log; do echo "== $(basename $f .log)"; grep -E "^ +1gpu" "$f" | awk '{print $2, $3, $4, $10}'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
