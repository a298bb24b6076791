#!/usr/bin/env bash
# Session 10 run H: the native Python API's batches (kvfabric.Store
# batch_put / batch_get, 4096 keys) of torch tensor views and of raw
# (ptr, nbytes) tuples: the package of b51156e (old, a Buf per key through
# the general resolver) against 975f3ec's (new: raw tuples on the flat path,
# tensors resolved inline), same library (975f3ec), x3 interleaved, every
# round verified; one bench call (go-embedded + python facade) for the
# ceiling and the Go API beside them.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 KVFABRIC_LIB=$D/libkvfabric.so
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
st bench "$D/kvfabric" bench --store --driver cuda --paths go-embedded,python --sizes 4KiB,64KiB --json "$L/bench.json"
for r in 1 2 3; do
  PYTHONPATH=$D/old-py/python st old-$r python3 "$D/nativeprobe.py" old 0
  PYTHONPATH=$PWD/python st new-$r python3 "$D/nativeprobe.py" new 0
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
