#!/usr/bin/env bash
# Builds what run1.sh needs into .device/ (from the repository root; then
# run1.sh on the device with carry [".device"]): for HEAD and PREV each a
# tree .device/t/{head,prev}/ with the Python package, the latency script,
# libkvfabric.so and the kvfabric binary (the remote rungs' master).
set -euo pipefail
HEAD_REV=${HEAD_REV:-HEAD} PREV=${PREV:-820a450}
W=$(mktemp -d)
trap 'for v in head prev; do git worktree remove --force "$W/$v" 2>/dev/null || true; done; rm -rf "$W"' EXIT
git worktree add -q "$W/head" "$HEAD_REV"
git worktree add -q "$W/prev" "$PREV"
rm -rf .device && mkdir -p .device/t
echo "head $(git rev-parse --short "$HEAD_REV"); prev $(git rev-parse --short "$PREV")" > .device/t/versions.txt
for v in head prev; do
  T=.device/t/$v
  mkdir -p $T/scripts
  cp -r "$W/$v/python" $T/python
  rm -rf $T/python/tests
  cp "$W/$v/scripts/device-latency.sh" $T/scripts/
  (cd "$W/$v" && CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/$T/libkvfabric.so" ./capi)
  (cd "$W/$v" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/$T/kvfabric" ./cmd/kvfabric)
  rm -f $T/libkvfabric.h
done
xz -T0 -3 -f .device/t/*/kvfabric .device/t/*/libkvfabric.so
du -sh .device
