#!/usr/bin/env bash
# Session 22 run 2 (run2-build.sh first; carry [".device"]): split
# BatchPuts by runs (new) against by key hash (old), remote master, 3
# interleaved rounds each: 4 KiB-4 MiB with room, the same in a full store
# (--prefill), and one --scatter round each (nothing merges: runs must not
# cost). Then the python path of new beside go-embedded, and new's
# loopback PutStart/GetReplicas benchmark. Logs packed into
# $OUT/logs.tar.xz (the device returns at most a few files).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/*/kvfabric.xz .device/master.test.xz .device/libkvfabric.so.xz
chmod +x .device/v/*/kvfabric .device/master.test
V=.device/v
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 120 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp $V/versions.txt "$L/"
S="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB,4MiB --paths go-remote"
for rep in 1 2 3; do
  for v in new old; do
    st room-$v-$rep $V/$v/kvfabric bench --store --driver cuda $S --json "$L/room-$v-$rep.json"
    st full-$v-$rep $V/$v/kvfabric bench --store --driver cuda $S --prefill --json "$L/full-$v-$rep.json"
  done
done
for v in new old; do
  st scatter-$v $V/$v/kvfabric bench --store --driver cuda $S --scatter --json "$L/scatter-$v.json"
done
KVFABRIC_LIB=$PWD/.device/libkvfabric.so st python $V/new/kvfabric bench --store --driver cuda --sizes 16KiB,64KiB,256KiB,1MiB --paths go-embedded,python --json "$L/python.json"
(cd internal/master && st loopback ../../.device/master.test -test.run xxx -test.bench 'BenchmarkLoopbackOneCaller' -test.benchtime 100x)
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; cat "$L/ranges.txt"
