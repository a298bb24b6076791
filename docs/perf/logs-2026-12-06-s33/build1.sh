#!/usr/bin/env bash
# Session 33 run 1's build (from the repository root; then run1.sh with
# carry [".device"]): `make device` (kvfabric, libkvfabric.so and the
# real-driver test binaries of internal/cuda, internal/transfer and
# internal/mapping), xz-packed to fit the carry.
set -euo pipefail
make -s device
rm -f .device/*.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -9 -f .device/kvfabric .device/libkvfabric.so .device/*.test
du -sh .device
