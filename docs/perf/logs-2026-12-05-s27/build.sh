#!/usr/bin/env bash
# Builds what run1.sh needs into .device/ (from the repository root; then
# run1.sh on the device with carry [".device"]): kvfabric and the master
# package's test binary of the working tree (head), of UNI (default
# 7898cb6: uniform PutStart on the wire, before the parts) and of PREV
# (default 645d7b3: main before this session).
set -euo pipefail
UNI=${UNI:-7898cb6}
PREV=${PREV:-645d7b3}
rm -rf .device && mkdir -p .device/uni .device/prev
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
go test -c -ldflags='-s -w' -o .device/master.test ./internal/master
for v in uni prev; do
  rev=$UNI; [ $v = prev ] && rev=$PREV
  wt=$(mktemp -d); git worktree add -q --detach "$wt" "$rev"
  (cd "$wt" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/$v/kvfabric" ./cmd/kvfabric \
     && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/$v/master.test" ./internal/master)
  git worktree remove --force "$wt"
done
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); uni $UNI; prev $PREV" > .device/version.txt
xz -T0 -3 -f .device/kvfabric .device/master.test .device/uni/* .device/prev/*
du -sh .device
