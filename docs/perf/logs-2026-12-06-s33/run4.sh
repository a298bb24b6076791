#!/usr/bin/env bash
# Session 33 run 4 (build4.sh's .device): run 2 again on another machine —
# chunks counting copy-engine regions (head) against chunks of keys (prev),
# python-multi at 1 - 16 MiB, x3 interleaved — then the goals table with
# head: go-embedded, go-remote, python and python-multi at 4 KiB - 16 MiB,
# x1, with a plot.
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
for rep in 1 2 3; do
  for v in head prev; do
    st multi-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so KVFABRIC_BIN=$D/$v/kvfabric "$D/$v/kvfabric" bench --store --driver cuda --paths python-multi --sizes 1MiB,4MiB,16MiB --json "$L/multi-$v-$rep.json"
  done
  pack
done
st all-head env KVFABRIC_LIB=$D/head/libkvfabric.so KVFABRIC_BIN=$D/head/kvfabric "$D/head/kvfabric" bench --store --driver cuda --paths go-embedded,go-remote,python,python-multi --json "$L/all-head.json" --plot "$L/all-head.svg"
pack
cat "$L/summary.txt"
for f in "$L"/multi-*.log; do echo "== $(basename $f .log) $(grep -E '^ +1gpu' "$f" | awk '{print $3, $4, $10}' | paste -sd' ')"; done
echo "== all-head"; grep -E "^ +1gpu" "$L/all-head.log" | awk '{print $2, $3, $4, $10}' | paste -sd' ' | fold -w 400
grep -A3 "master put path" "$L/all-head.log"
grep -m1 "Product Name" "$L/nvidia-smi.log"
