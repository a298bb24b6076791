#!/usr/bin/env bash
# Builds what run3.sh needs into .device/: HEAD's kvfabric and the master
# package's test binary (for BenchmarkPutRounds on the lab host's CPU).
set -euo pipefail
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
go test -c -o .device/master.test ./internal/master
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)')" > .device/version.txt
xz -T0 -3 -f .device/kvfabric .device/master.test
du -sh .device
