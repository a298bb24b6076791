#!/usr/bin/env bash
# Session 24 run 3 (the .device of run1-build.sh; carry [".device"];
# "prev" = b5b06db, the code of main). Run 2 found go-remote puts lower in
# a bench process that measured nothing before them (64 KiB 0.60-0.63)
# than after go-embedded in the same process (0.72-0.76); not GC
# (GOGC=off), not the 4 KiB rounds. Here, x3 interleaved:
#   rr   go-remote twice in one process (a second go-remote: is it the
#        process's own state, whatever ran first?)
#   ra   go-remote alone (as run2's rs-default)
# then --gpu-times timelines of go-remote 64 KiB alone and after
# go-embedded, and the goals table (every size and path, x2).
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
S=16KiB,64KiB,256KiB
for rep in 1 2 3; do
  st rr-$rep $K bench --store --driver cuda --sizes $S --paths go-remote,go-remote --json "$L/rr-$rep.json"
  st ra-$rep $K bench --store --driver cuda --sizes $S --paths go-remote --json "$L/ra-$rep.json"
done
st tl-alone $K bench --store --driver cuda --sizes 64KiB --paths go-remote --gpu-times
st tl-after $K bench --store --driver cuda --sizes 64KiB --paths go-embedded,go-remote --gpu-times
for rep in 1 2; do
  KVFABRIC_LIB=$PWD/.device/v/prev/libkvfabric.so st all-prev-$rep $K bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-prev-$rep.json"
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -h "go-remote  put   64KiB" "$L"/rr-*.log "$L"/ra-*.log; grep -A40 "== all" "$L/ranges.txt"
