#!/usr/bin/env bash
# Session 32 run 6's build (from the repository root; then run6.sh with
# carry [".device"]): libkvfabric.so of HEAD (.device/head) and of a99e4fd
# (.device/prev, session 31's last commit: no growFor, clip per key); the
# Python package is the same in both (git diff a99e4fd HEAD -- python is
# empty), run from the tree.
set -euo pipefail
PREV=a99e4fd
rm -rf .device && mkdir -p .device/head .device/prev
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/head/libkvfabric.so ./capi
tmp=$(mktemp -d); git worktree add -q "$tmp" "$PREV"
(cd "$tmp" && CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/prev/libkvfabric.so" ./capi)
git worktree remove --force "$tmp"
rm -f .device/*/*.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -9 -f .device/head/libkvfabric.so .device/prev/libkvfabric.so
du -sh .device
