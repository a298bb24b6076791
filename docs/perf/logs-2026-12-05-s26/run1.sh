#!/usr/bin/env bash
# Session 26 run 1: the go-embedded path on a master split by key
# (--master-shards 1, 2, 4, 8), interleaved, one machine, one build
# (build.sh). small: 4 KiB-256 KiB x3; scatter: keys at random slots (no
# copies merge, as in a paged KV cache) x2; gt: --gpu-times phases x2;
# all7: every size x2.
set -u
L=$OUT/logs; mkdir -p "$L"
[ -x .device/kvfabric ] || { python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/*.xz; chmod +x .device/kvfabric; }
K=$PWD/.device/kvfabric
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
B="$K bench --store --driver cuda --paths go-embedded"
for rep in 1 2 3; do
  for s in 1 2 4 8; do
    st s$s-small-$rep $B --master-shards $s --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/s$s-small-$rep.json"
  done
done
pack
for rep in 1 2; do
  for s in 1 4; do
    st s$s-scatter-$rep $B --master-shards $s --scatter --sizes 4KiB,16KiB,64KiB --json "$L/s$s-scatter-$rep.json"
    st s$s-gt-$rep $B --master-shards $s --gpu-times --sizes 4KiB,16KiB --json "$L/s$s-gt-$rep.json"
    st s$s-all7-$rep $B --master-shards $s --json "$L/s$s-all7-$rep.json"
  done
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'; grep -m1 "GPU UUID" "$L/nvidia-smi.log"
