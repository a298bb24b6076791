#!/usr/bin/env bash
# Session 31 run 4 (build3.sh rerun at the commit where --prepare-in-call
# takes n: every n-th put chunk is prepared in the master call, the others
# on the pipeline's goroutine): go-embedded 4-64 KiB with n = 0 (all on
# the pipeline, the default), 1 (all in the call), 2 and 3, x3
# interleaved.
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
  for n in 0 1 2 3; do
    st prep$n-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB --prepare-in-call $n --json "$L/prep$n-$rep.json"
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/prep?-?.log; do echo "== $(basename $f .log)"; grep -E "go-embedded +put" "$f" | awk '{print $4, $10, "check", $12, "meta", $13, "resolve", $14, "copy", $15, "master", $17, "end", $19}'; grep -E "^ +4KiB" "$f"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
