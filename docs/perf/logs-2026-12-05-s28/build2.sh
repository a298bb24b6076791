#!/usr/bin/env bash
# Session 28 run 2's build (from the repository root; then run2.sh with
# carry [".device"]): HEAD's kvfabric, libkvfabric.so, the client and
# master packages' test binaries, and PREV's kvfabric (default 645d7b3:
# main before session 27's uniform puts) for the go-remote Store A/B.
set -euo pipefail
PREV=${PREV:-645d7b3}
rm -rf .device && mkdir -p .device/prev
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/libkvfabric.so ./capi
rm -f .device/libkvfabric.h
go test -c -ldflags='-s -w' -o .device/client.test ./internal/client
go test -c -ldflags='-s -w' -o .device/master.test ./internal/master
wt=$(mktemp -d); git worktree add -q --detach "$wt" "$PREV"
(cd "$wt" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/prev/kvfabric" ./cmd/kvfabric)
git worktree remove --force "$wt"
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -9 -f .device/kvfabric .device/libkvfabric.so .device/client.test .device/master.test .device/prev/kvfabric
du -sh .device
