#!/usr/bin/env bash
# Session 31 run 1's build (from the repository root; then run1.sh with
# carry [".device"]): HEAD's kvfabric and master test binary (GetReplicas
# and PutStart answered by column), and the kvfabric of 8902203 (prev:
# session 30's main, answers by result) for the go-remote Store A/B, where
# the bench starts `kvfabric master` from the same binary as its client.
set -euo pipefail
PREV=8902203
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
go test -c -ldflags='-s -w' -o .device/master.test ./internal/master
P=$(mktemp -d) && git worktree add -q --detach "$P/src" $PREV
(cd "$P/src" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/kvfabric-prev" ./cmd/kvfabric)
git worktree remove --force "$P/src" && rm -rf "$P"
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -9 -f .device/kvfabric* .device/*.test
du -sh .device
