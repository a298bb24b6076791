#!/usr/bin/env bash
# Session 33 run 3's build (from the repository root; then run3.sh with
# carry [".device"]): kvfabric and libkvfabric.so of HEAD (.device/head:
# chunks count the regions that go to the copy engines) and of HEAD with
# every region counted (.device/all: ceRegionsPerKey's threshold 1 byte,
# so keys of small regions for the SM kernel get region-sized chunks too;
# a variant for this run only, not committed).
set -euo pipefail
rm -rf .device && mkdir -p .device/head .device/all
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/head/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/head/libkvfabric.so ./capi
tmp=$(mktemp -d); git worktree add -q "$tmp" HEAD
sed -i 's/ceRegionsPerKey(srcs, s.cfg.CopyEngineMinBytes)/ceRegionsPerKey(srcs, 1)/; s/ceRegionsPerKey(dsts\[lo:hi\], s.cfg.GetCopyEngineMinBytes)/ceRegionsPerKey(dsts[lo:hi], 1)/' "$tmp/internal/client/ops.go"
test "$(grep -cE 'ceRegionsPerKey\((srcs|dsts\[lo:hi\]), 1\)' "$tmp/internal/client/ops.go")" = 2
(cd "$tmp" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/all/kvfabric" ./cmd/kvfabric && \
  CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/all/libkvfabric.so" ./capi)
git worktree remove --force "$tmp"
rm -f .device/*/*.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); all = head with every region counted" > .device/version.txt
xz -T0 -9 -f .device/head/* .device/all/*
du -sh .device
