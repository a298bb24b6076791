#!/usr/bin/env bash
# Builds what run2.sh needs into .device/ (from the repository root; then
# run2.sh on the device with carry [".device"]): HEAD's kvfabric, and
# PREV's (default 925e915: chunks built on the pipeline's goroutine) as
# .device/prev/kvfabric.
set -euo pipefail
PREV=${PREV:-925e915}
rm -rf .device && mkdir -p .device/prev
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
wt=$(mktemp -d); git worktree add -q --detach "$wt" "$PREV"
(cd "$wt" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/prev/kvfabric" ./cmd/kvfabric)
git worktree remove --force "$wt"
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -3 -f .device/kvfabric .device/prev/kvfabric
du -sh .device
