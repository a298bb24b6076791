#!/usr/bin/env bash
# Session 31 run 3 (build3.sh's .device): an embedded master's put chunks
# prepared on the pipeline's goroutine (default) against inside the
# PutStart call on the master worker (--prepare-in-call), go-embedded
# 4-64 KiB, x4 interleaved, with the master put path alone per run.
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
for rep in 1 2 3 4; do
  st loop-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB --json "$L/loop-$rep.json"
  st call-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB --prepare-in-call --json "$L/call-$rep.json"
  pack
done
cat "$L/summary.txt"
for f in "$L"/loop-?.log "$L"/call-?.log; do echo "== $(basename $f .log)"; grep -E "go-embedded +(put|get)" "$f" | awk '{print $3, $4, $10, "|", $13, $14, $15, $16, "|", $18, $19, $20}'; grep -E "^ +4KiB" "$f"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
