#!/usr/bin/env bash
# Session 32 run 1 (build1.sh's .device): where a 4096-key batch get's time
# goes from Python (getprobe.py at 64 and 16 KiB: the facade, the flat
# call, the get stream, the bare C call), then the bench's python path
# with the get stream (head) against without (prev-tree), the same
# libkvfabric.so, go-embedded beside it; 16-256 KiB, x4 interleaved.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 240 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric
for sz in 65536 16384; do
  st probe-$sz env PYTHONPATH=$PWD/python PROBE_SIZE=$sz PROBE_ROUNDS=20 python3 docs/perf/logs-2026-12-06-s32/getprobe.py
done
pack
for rep in 1 2 3 4; do
  st head-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes 16KiB,64KiB,256KiB --json "$L/head-$rep.json"
  st prev-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes 16KiB,64KiB,256KiB --python-script "$D/prev-tree/scripts/bench-store.py" --json "$L/prev-$rep.json"
  pack
done
cat "$L/summary.txt"
cat "$L"/probe-*.log
for f in "$L"/head-?.log "$L"/prev-?.log; do echo "== $(basename $f .log)"; grep -E "1gpu +(go-embedded|python) +(put|get)" "$f" | awk '{print $2, $3, $4, $10}'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
