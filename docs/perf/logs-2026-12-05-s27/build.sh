#!/usr/bin/env bash
# Builds what run1.sh needs into .device/ (from the repository root; then
# run1.sh on the device with carry [".device"]): kvfabric and the master
# package's test binary of the working tree (head: uniform PutStart on the
# wire) and of PREV (default 645d7b3: main before session 27).
set -euo pipefail
PREV=${PREV:-645d7b3}
rm -rf .device && mkdir -p .device/prev
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
go test -c -ldflags='-s -w' -o .device/master.test ./internal/master
wt=$(mktemp -d); git worktree add -q --detach "$wt" "$PREV"
(cd "$wt" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/prev/kvfabric" ./cmd/kvfabric \
   && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/prev/master.test" ./internal/master)
git worktree remove --force "$wt"
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -3 -f .device/kvfabric .device/master.test .device/prev/*
du -sh .device
