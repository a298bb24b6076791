#!/usr/bin/env bash
# Builds what run2.sh needs into .device/ (from the repository root; then
# run2.sh on the device with carry [".device"]):
#   .device/v/new/kvfabric.xz   NEW (default HEAD): a split BatchPut deals runs of consecutive keys
#   .device/v/old/kvfabric.xz   OLD (default 25dae93): parts by key hash
#   .device/libkvfabric.so.xz   the python path's library (NEW)
#   .device/master.test.xz      NEW's internal/master tests (loopback benchmark)
set -euo pipefail
NEW=${NEW:-HEAD} OLD=${OLD:-25dae93}
W=$(mktemp -d)
trap 'for v in new old; do git worktree remove --force "$W/$v" 2>/dev/null || true; done; rm -rf "$W"' EXIT
git worktree add -q "$W/new" "$NEW"
git worktree add -q "$W/old" "$OLD"
rm -rf .device && mkdir -p .device/v
echo "new $(git rev-parse --short "$NEW"); old $(git rev-parse --short "$OLD")" > .device/v/versions.txt
for v in new old; do
  mkdir -p .device/v/$v
  (cd "$W/$v" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/v/$v/kvfabric" ./cmd/kvfabric)
done
(cd "$W/new" && CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/libkvfabric.so" ./capi)
(cd "$W/new" && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master.test" ./internal/master)
xz -T0 -3 -f .device/v/*/kvfabric .device/libkvfabric.so .device/master.test
du -sh .device
