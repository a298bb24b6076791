#!/usr/bin/env bash
# Session 25 run 1 (`run1-build.sh` first; carry [".device"]; head = the
# one-region Python get (65ad8c6) and the embedded master without
# rpc_timeout's timer (dadcc12); prev = 820a450, session 24's last code).
# x3 interleaved: scripts/device-latency.sh of each tree (one get from
# Python, embedded and remote master, 4 and 64 KiB), then x2 interleaved
# `bench --store` go-embedded 4-64 KiB (the batch paths, for no change).
# ONLY=lat runs the latency part alone; ONLY=emb the bench part alone,
# EMB_REPS times (default 2).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/t/*/*.xz
chmod +x .device/t/*/kvfabric
T=$PWD/.device/t
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp $T/versions.txt "$L/"
lat() { st lat-$1-$2 bash -c "cd $T/$1 && KVFABRIC_LIB=$T/$1/libkvfabric.so KVFABRIC_BIN=$T/$1/kvfabric OUT=$L KVFABRIC_LAT_JSON=lat-$1-$2.json scripts/device-latency.sh"; }
for rep in 1 2 3; do
  [ "${ONLY:-}" = emb ] && break
  for v in head prev; do
    lat $v $rep
  done
done
for rep in $(seq 1 ${EMB_REPS:-2}); do
  [ "${ONLY:-}" = lat ] && break
  for v in head prev; do
    st emb-$v-$rep $T/$v/kvfabric bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
done
pack
cat "$L/summary.txt"
for f in "$L"/lat-*.log; do echo "== $f"; grep -E "facade|store-ptr|torch-copy|remote-store-ptr|size|native" "$f"; done
grep -h "go-embedded" "$L"/emb-*.log | head -40
