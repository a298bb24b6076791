#!/usr/bin/env bash
# Device batch: the facade's batch_get_into in two halves at once (new,
# python/ of the working tree) against one call (old, .device/old/python).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D/kvfabric"
export KVFABRIC_LIB=$D/libkvfabric.so PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; python3 -c 'import torch; print("torch", torch.__version__)' >> "$L/env.txt" 2>&1
run() { # name, args...
  local name=$1; shift; local t0=$SECONDS
  timeout 90 "$D/kvfabric" bench --store --driver cuda --sizes 64KiB,256KiB --json "$L/$name.json" "$@" > "$L/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"
}
run go-1 --paths go-embedded
for r in 1 2; do
  run py-old-$r --paths python --python-script "$D/old/scripts/bench-store.py"
  run py-new-$r --paths python
done
run go-2 --paths go-embedded
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
