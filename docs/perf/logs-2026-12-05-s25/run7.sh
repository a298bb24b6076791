#!/usr/bin/env bash
# Session 25 run 7: scripts/device-python.sh (torch CUDA tensors through
# kvfabric.Store and the Mooncake facade, byte-exact) on HEAD's library and
# Python package, after the one-region get/put path. Build first
# (repository root): CGO_ENABLED=1 go build -buildmode=c-shared -o .device/libkvfabric.so ./capi
set -u
L=$OUT/logs; mkdir -p "$L"
git rev-parse --short HEAD > "$L/version.txt" 2>/dev/null || true
nvidia-smi -L > "$L/gpu.txt" 2>&1
scripts/device-python.sh > "$L/device-python.log" 2>&1
echo "rc=$?" >> "$L/device-python.log"
tail -30 "$L/device-python.log"
