#!/usr/bin/env bash
# Builds what run1.sh needs into .device/ (from the repository root; then
# run1.sh on the device with carry [".device"]):
#   .device/v/{head,puts,prev}/kvfabric.xz  HEAD (split batches' parts share the first chunk, puts and gets),
#                                           PUTS (the same for puts only),
#                                           PREV (b5b06db: session 23's last code)
#   .device/v/{head,prev}/libkvfabric.so.xz the python path's library
#   .device/master.test.xz                  HEAD's internal/master tests (loopback benchmarks)
set -euo pipefail
HEAD_REV=${HEAD_REV:-HEAD} PUTS=${PUTS:-HEAD~1} PREV=${PREV:-b5b06db}
W=$(mktemp -d)
trap 'for v in head puts prev; do git worktree remove --force "$W/$v" 2>/dev/null || true; done; rm -rf "$W"' EXIT
git worktree add -q "$W/head" "$HEAD_REV"
git worktree add -q "$W/puts" "$PUTS"
git worktree add -q "$W/prev" "$PREV"
rm -rf .device && mkdir -p .device/v
echo "head $(git rev-parse --short "$HEAD_REV"); puts $(git rev-parse --short "$PUTS"); prev $(git rev-parse --short "$PREV")" > .device/v/versions.txt
for v in head puts prev; do
  mkdir -p .device/v/$v
  (cd "$W/$v" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/v/$v/kvfabric" ./cmd/kvfabric)
done
for v in head prev; do
  (cd "$W/$v" && CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/v/$v/libkvfabric.so" ./capi)
  rm -f .device/v/$v/libkvfabric.h
done
(cd "$W/head" && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master.test" ./internal/master)
xz -T0 -3 -f .device/v/*/kvfabric .device/v/*/libkvfabric.so .device/master.test
du -sh .device
