#!/usr/bin/env bash
# Session 23 run 3 (run3-build.sh first; carry [".device"]). Old and new
# interleaved, every round byte-verified, logs packed into
# $OUT/logs.tar.xz (the device returns at most a few files):
#   A. the put pipeline's builder: go-embedded head vs prev, 4 KiB-1 MiB,
#      with room (x3) and in a full store (--prefill, x2)
#   B. remote puts: go-remote head (runs, hints over the wire) vs prev
#      (runs) vs old (key hash), with room (x2); head vs old full (x1) and
#      one --scatter round each
#   C. the python path, head vs prev (x1; go-embedded beside it)
# (Cut to about four minutes: the session's device time was mostly spent
# on refused starts.)
#   D. head's BenchmarkLoopbackOneCaller (remote PutStart per key) and
#      BenchmarkLoopbackPutEnd (hints on/off) on the host CPU
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/*/*.xz .device/master.test.xz
chmod +x .device/v/*/kvfabric .device/master.test
V=.device/v
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp $V/versions.txt "$L/"
E="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB --paths go-embedded"
for rep in 1 2 3; do
  for v in head prev; do
    st emb-$v-$rep $V/$v/kvfabric bench --store --driver cuda $E --json "$L/emb-$v-$rep.json"
  done
done
for rep in 1 2; do
  for v in head prev; do
    st embfull-$v-$rep $V/$v/kvfabric bench --store --driver cuda $E --prefill --json "$L/embfull-$v-$rep.json"
  done
done
R="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB,4MiB --paths go-remote"
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
st tl-remote-256K-head $V/head/kvfabric bench --store --driver cuda --sizes 256KiB,1MiB --paths go-remote --gpu-times
st tl-emb-16K-head $V/head/kvfabric bench --store --driver cuda --sizes 4KiB,16KiB --paths go-embedded --gpu-times
for v in head old; do
  st remotescatter-$v $V/$v/kvfabric bench --store --driver cuda $R --scatter --json "$L/remotescatter-$v.json"
done
for rep in 1; do
  for v in head prev; do
    KVFABRIC_LIB=$PWD/$V/$v/libkvfabric.so st python-$v-$rep $V/$v/kvfabric bench --store --driver cuda --sizes 16KiB,64KiB,256KiB,1MiB --paths go-embedded,python --json "$L/python-$v-$rep.json"
  done
done
(cd internal/master && st loopback ../../.device/master.test -test.run xxx -test.bench 'BenchmarkLoopbackOneCaller|BenchmarkLoopbackPutEnd' -test.benchtime 100x)
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; cat "$L/ranges.txt"
