#!/usr/bin/env bash
# Session 24 run 2 (the .device of run1-build.sh; carry [".device"]). Its
# "prev" (b5b06db) is the code of main after the first-chunk revert
# (e35f8b3). Why a go-remote run alone measured remote puts far below the
# go-remote rows of a run that measured go-embedded (and 4 KiB) first
# (run1: 64 KiB put 0.461-0.644 against 0.707-0.734). x3 interleaved,
# 16 KiB-1 MiB unless named:
#   rs-default  go-remote alone (as run1's remote-*)
#   rs-gogcoff  the same with GOGC=off (bench and the master it spawns)
#   rs-from4k   go-remote alone, 4 KiB first (65536-key rounds)
#   rs-afteremb go-embedded then go-remote in one run (as run1's all-*)
# then the goals table again (all-prev, every size, every path, x2).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/prev/*.xz
chmod +x .device/v/prev/kvfabric
K=.device/v/prev/kvfabric
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/v/versions.txt "$L/"
S=16KiB,64KiB,256KiB,1MiB
for rep in 1 2 3; do
  st rs-default-$rep $K bench --store --driver cuda --sizes $S --paths go-remote --json "$L/rs-default-$rep.json"
  GOGC=off st rs-gogcoff-$rep $K bench --store --driver cuda --sizes $S --paths go-remote --json "$L/rs-gogcoff-$rep.json"
  st rs-from4k-$rep $K bench --store --driver cuda --sizes 4KiB,$S --paths go-remote --json "$L/rs-from4k-$rep.json"
  st rs-afteremb-$rep $K bench --store --driver cuda --sizes $S --paths go-embedded,go-remote --json "$L/rs-afteremb-$rep.json"
done
for rep in 1 2; do
  KVFABRIC_LIB=$PWD/.device/v/prev/libkvfabric.so st all-prev-$rep $K bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-prev-$rep.json"
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -A30 "== rs-\|== all" "$L/ranges.txt" | grep -v "4MiB\|16MiB" 
