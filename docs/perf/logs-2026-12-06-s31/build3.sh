#!/usr/bin/env bash
# Session 31 run 3's build (from the repository root; then run3.sh with
# carry [".device"]): HEAD's kvfabric only (it has --prepare-in-call).
set -euo pipefail
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -9 -f .device/kvfabric
du -sh .device
