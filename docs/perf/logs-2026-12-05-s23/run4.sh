#!/usr/bin/env bash
# Session 23 run 4 (run3-build.sh at the builder's revert first; carry
# [".device"]): remote puts and gets, head (split by runs, hints over the
# wire, pooled fast-path buffers; no builder) against prev = af47d9f
# (split by runs) and old = 25dae93 (split by key hash), with room x2
# interleaved, and head against old in a full store x1 (cut to the device
# time left). Logs packed into $OUT/logs.tar.xz.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/*/kvfabric.xz
chmod +x .device/v/*/kvfabric
V=.device/v
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp $V/versions.txt "$L/"
R="--sizes 64KiB,256KiB,1MiB,4MiB --paths go-remote"
for rep in 1 2; do
  for v in head prev old; do
    st remote-$v-$rep $V/$v/kvfabric bench --store --driver cuda $R --json "$L/remote-$v-$rep.json"
  done
done
for rep in 1; do
  for v in head old; do
    st remotefull-$v-$rep $V/$v/kvfabric bench --store --driver cuda $R --prefill --json "$L/remotefull-$v-$rep.json"
  done
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; cat "$L/ranges.txt"
