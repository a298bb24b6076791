#!/usr/bin/env bash
# Session 25 run 3 (after run2 on the same machine, same .device/ build):
# does the size list change the small sizes' results? go-embedded with
# the three small sizes only (as run1) and with all seven (as the goals
# table), x3 interleaved, one machine.
set -u
L=$OUT/logs; mkdir -p "$L"
[ -x .device/kvfabric ] || { python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/*.xz; chmod +x .device/kvfabric; }
K=$PWD/.device/kvfabric
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
for rep in 1 2 3; do
  st small-$rep $K bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --json "$L/small-$rep.json"
  st all7-$rep $K bench --store --driver cuda --paths go-embedded --json "$L/all7-$rep.json"
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'; grep -m1 "GPU UUID" "$L/nvidia-smi.log"
