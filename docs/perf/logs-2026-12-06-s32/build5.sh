#!/usr/bin/env bash
# Session 32 run 5's build (from the repository root; then run5.sh with
# carry [".device"]): HEAD's kvfabric and, as .device/prev/kvfabric, the
# one of 08cdf83 (the put pipeline building its chunks itself, no
# preparer goroutine).
set -euo pipefail
PREV=08cdf83
rm -rf .device && mkdir -p .device/prev
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
tmp=$(mktemp -d); git worktree add -q "$tmp" "$PREV"
(cd "$tmp" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/prev/kvfabric" ./cmd/kvfabric)
git worktree remove --force "$tmp"
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -9 -f .device/kvfabric .device/prev/kvfabric
du -sh .device
