#!/usr/bin/env bash
# Session 24 run 3 (`HEAD_REV=HEAD PUTS=HEAD PREV=b5b06db run1-build.sh`
# first; carry [".device"]; head = 2e89410: a split put's requests built
# into slices of the batch's size; prev = b5b06db). x3 interleaved:
#   ab-alone-{head,prev}  go-remote alone, 16 KiB-1 MiB
#   ab-full-{head,prev}   go-embedded then go-remote in one process
#   rr-prev               go-remote twice in one process (run2's question:
#                         is the low go-remote-alone figure whatever ran
#                         first in the process?)
# then a --gpu-times timeline of head's and prev's remote 64 KiB put, and
# the goals table for head (every size and path, x2).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/head/*.xz .device/v/prev/*.xz
chmod +x .device/v/*/kvfabric
V=.device/v
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp $V/versions.txt "$L/"
S=16KiB,64KiB,256KiB,1MiB
for rep in 1 2 3; do
  for v in head prev; do
    st ab-alone-$v-$rep $V/$v/kvfabric bench --store --driver cuda --sizes $S --paths go-remote --json "$L/ab-alone-$v-$rep.json"
    st ab-full-$v-$rep $V/$v/kvfabric bench --store --driver cuda --sizes $S --paths go-embedded,go-remote --json "$L/ab-full-$v-$rep.json"
  done
  st rr-prev-$rep $V/prev/kvfabric bench --store --driver cuda --sizes $S --paths go-remote,go-remote --json "$L/rr-prev-$rep.json"
done
for v in head prev; do
  st tl-remote-64K-$v $V/$v/kvfabric bench --store --driver cuda --sizes 64KiB --paths go-remote --gpu-times
done
for rep in 1 2; do
  KVFABRIC_LIB=$PWD/$V/head/libkvfabric.so st all-head-$rep $V/head/kvfabric bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-head-$rep.json"
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -A9 "== ab-\|== rr" "$L/ranges.txt" | grep "put\|=="; grep -h "go-remote  put   64KiB" "$L"/rr-*.log
