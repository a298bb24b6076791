#!/usr/bin/env bash
# Session 29 run 1's build (from the repository root; then run1.sh with
# carry [".device"]): HEAD's kvfabric, libkvfabric.so and the client and
# master packages' test binaries.
set -euo pipefail
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/libkvfabric.so ./capi
rm -f .device/libkvfabric.h
go test -c -ldflags='-s -w' -o .device/client.test ./internal/client
go test -c -ldflags='-s -w' -o .device/master.test ./internal/master
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -9 -f .device/kvfabric .device/libkvfabric.so .device/client.test .device/master.test
du -sh .device
