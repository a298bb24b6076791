#!/usr/bin/env bash
# Builds what the run scripts need into .device/ (from the repository root; then
# runN.sh on the device with carry [".device"]): HEAD's kvfabric and
# libkvfabric.so (the python path uses the working tree's python/).
set -euo pipefail
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/libkvfabric.so ./capi
rm -f .device/libkvfabric.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -3 -f .device/kvfabric .device/libkvfabric.so
du -sh .device
