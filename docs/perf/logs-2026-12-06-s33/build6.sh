#!/usr/bin/env bash
# Session 33 run 6's build (from the repository root; then run6.sh with
# carry [".device"]): HEAD's kvfabric and libkvfabric.so, xz-packed.
set -euo pipefail
rm -rf .device && mkdir -p .device/head
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/head/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/head/libkvfabric.so ./capi
rm -f .device/*/*.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -9 -f .device/head/*
du -sh .device
