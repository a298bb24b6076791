#!/usr/bin/env bash
# Builds what run3.sh needs into .device/ (from the repository root; then
# run3.sh on the device with carry [".device"]):
#   .device/v/{head,prev,old}/kvfabric.xz   HEAD (default HEAD: the put pipeline's builder),
#                                           PREV (af47d9f: split puts by runs, no builder),
#                                           OLD (25dae93: split puts by key hash)
#   .device/v/{head,prev}/libkvfabric.so.xz the python path's library
#   .device/master.test.xz                  HEAD's internal/master tests (loopback benchmark)
set -euo pipefail
HEAD_REV=${HEAD_REV:-HEAD} PREV=${PREV:-af47d9f} OLD=${OLD:-25dae93}
W=$(mktemp -d)
trap 'for v in head prev old; do git worktree remove --force "$W/$v" 2>/dev/null || true; done; rm -rf "$W"' EXIT
git worktree add -q "$W/head" "$HEAD_REV"
git worktree add -q "$W/prev" "$PREV"
git worktree add -q "$W/old" "$OLD"
rm -rf .device && mkdir -p .device/v
echo "head $(git rev-parse --short "$HEAD_REV"); prev $(git rev-parse --short "$PREV"); old $(git rev-parse --short "$OLD")" > .device/v/versions.txt
for v in head prev old; do
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
