#!/usr/bin/env bash
# Builds what run2.sh needs into .device/: HEAD's kvfabric, libkvfabric.so
# (the python path uses the working tree's python/) and the master
# package's test binary.
set -euo pipefail
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/libkvfabric.so ./capi
rm -f .device/libkvfabric.h
go test -c -o .device/master.test ./internal/master
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -3 -f .device/kvfabric .device/libkvfabric.so .device/master.test
du -sh .device
