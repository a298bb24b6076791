#!/usr/bin/env bash
# Session 31 runs 3-5's build (from the repository root; then run3.sh,
# run4.sh or run5.sh with carry [".device"]): HEAD's kvfabric only (at
# runs 3 and 4 it had --prepare-in-call).
set -euo pipefail
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -9 -f .device/kvfabric
du -sh .device
