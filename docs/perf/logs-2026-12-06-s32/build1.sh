#!/usr/bin/env bash
# Session 32 run 1's build (from the repository root; then run1.sh with
# carry [".device"]): HEAD's kvfabric and libkvfabric.so, and in
# .device/prev-tree the Python package and scripts/bench-store.py of
# a99e4fd (no get stream), which the bench finds beside the script given
# by --python-script.
set -euo pipefail
PREV=a99e4fd # session 31's last commit: no get stream
rm -rf .device && mkdir -p .device/prev-tree
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/libkvfabric.so ./capi
rm -f .device/*.h
git archive "$PREV" python scripts/bench-store.py | tar -x -C .device/prev-tree
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev-tree python of $PREV" > .device/version.txt
xz -T0 -9 -f .device/kvfabric .device/libkvfabric.so
du -sh .device
