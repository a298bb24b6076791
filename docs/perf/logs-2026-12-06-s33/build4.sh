#!/usr/bin/env bash
# Session 33 run 4's build (from the repository root; then run4.sh with
# carry [".device"]): kvfabric and libkvfabric.so of HEAD (.device/head:
# chunks counting copy-engine regions) and of 255b92f (.device/prev:
# chunks of keys); the Python package and scripts/bench-store.py are the
# tree's (the same in both).
set -euo pipefail
PREV=255b92f # session 33 before the copy-engine chunks
rm -rf .device && mkdir -p .device/head .device/prev
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/head/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/head/libkvfabric.so ./capi
tmp=$(mktemp -d); git worktree add -q "$tmp" "$PREV"
(cd "$tmp" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/prev/kvfabric" ./cmd/kvfabric && \
  CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/prev/libkvfabric.so" ./capi)
git worktree remove --force "$tmp"
rm -f .device/*/*.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -9 -f .device/head/* .device/prev/*
du -sh .device
