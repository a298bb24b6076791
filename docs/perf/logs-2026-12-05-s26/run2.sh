#!/usr/bin/env bash
# Session 26 run 2: chunks built on a goroutine of their own (head) against
# on the pipeline's (prev), go-embedded, interleaved on one machine
# (build2.sh). small: 4 KiB-256 KiB x4; gt: --gpu-times x2; all7: every
# size x2; scatter: keys at random slots x2.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/kvfabric.xz .device/prev/kvfabric.xz
chmod +x .device/kvfabric .device/prev/kvfabric
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
for rep in 1 2 3 4; do
  for v in prev head; do
    K=.device/kvfabric; [ $v = prev ] && K=.device/prev/kvfabric
    st $v-small-$rep $K bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/$v-small-$rep.json"
  done
done
pack
for rep in 1 2; do
  for v in prev head; do
    K=.device/kvfabric; [ $v = prev ] && K=.device/prev/kvfabric
    st $v-gt-$rep $K bench --store --driver cuda --paths go-embedded --gpu-times --sizes 4KiB,16KiB --json "$L/$v-gt-$rep.json"
    st $v-all7-$rep $K bench --store --driver cuda --paths go-embedded --json "$L/$v-all7-$rep.json"
    st $v-scatter-$rep $K bench --store --driver cuda --paths go-embedded --scatter --sizes 4KiB,16KiB,64KiB --json "$L/$v-scatter-$rep.json"
  done
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'; grep -m1 "GPU UUID" "$L/nvidia-smi.log"
