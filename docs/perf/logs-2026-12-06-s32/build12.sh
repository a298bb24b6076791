#!/usr/bin/env bash
# Session 32 run 12's build (from the repository root; then run12.sh with
# carry [".device"]): kvfabric and libkvfabric.so of HEAD (.device/head: a
# batch get counting a key once per region when it splits over cores) and of
# c6ead21 (.device/prev: keys counted once); the Python package
# and scripts/bench-store.py are the tree's (the same in both).
set -euo pipefail
PREV=c6ead21
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
