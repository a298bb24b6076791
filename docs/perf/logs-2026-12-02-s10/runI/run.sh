#!/usr/bin/env bash
# Session 10 run I: the real driver's PointerMemoryTypes with the range
# shortcut (a pointer inside the address range of the last one the driver
# knew takes its type unasked). TestGPUPointerMemoryTypesRanges (a batch's
# answers are each pointer's own: allocation ends, a registration's edge, a
# VMM reservation with a hole) and TestGPUPointerMemoryTypes; then the
# native Python API's batches of unregistered tensor views / raw tuples
# (nativeprobe.py, 4096 keys) with the library before (975f3ec, old) and
# after (new) the shortcut, same Python package, x3 interleaved, every round
# verified; the check phase is the buffer classification.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/*.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu | grep -i "model name" >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
(cd internal/cuda && KVFABRIC_GPU_TESTS=1 st gputest "$D/cuda.test" -test.run 'TestGPUPointerMemoryTypes' -test.v -test.count 1)
for r in 1 2 3; do
  KVFABRIC_LIB=$D/libkvfabric-old.so PYTHONPATH=$PWD/python st old-$r python3 "$D/nativeprobe.py" old 0
  KVFABRIC_LIB=$D/libkvfabric.so PYTHONPATH=$PWD/python st new-$r python3 "$D/nativeprobe.py" new 0
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
