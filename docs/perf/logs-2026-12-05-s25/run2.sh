#!/usr/bin/env bash
# Session 25 run 2 (`run2-build.sh` first; carry [".device"]).
#   ds-{own,default}-N  go-embedded and go-remote, 16 KiB-1 MiB, on a stream
#                       of the bench's own or on the default stream
#                       (--default-stream, as the python path and an engine
#                       that passes no stream), x3 interleaved
#   all-N               the goals table: every size and path, x2
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/*.xz
chmod +x .device/kvfabric
K=$PWD/.device/kvfabric
export KVFABRIC_LIB=$PWD/.device/libkvfabric.so
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
S=16KiB,64KiB,256KiB,1MiB
for rep in 1 2 3; do
  st ds-own-$rep $K bench --store --driver cuda --sizes $S --paths go-embedded,go-remote --json "$L/ds-own-$rep.json"
  st ds-default-$rep $K bench --store --driver cuda --sizes $S --paths go-embedded,go-remote --default-stream --json "$L/ds-default-$rep.json"
done
for rep in 1 2; do
  st all-$rep $K bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-$rep.json"
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; cat "$L/ranges.txt" | grep -v "^$" | sed 's/  merged.*//'
