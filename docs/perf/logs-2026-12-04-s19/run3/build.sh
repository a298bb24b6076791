#!/usr/bin/env bash
# Builds what run.sh needs into .device/ (run from the repository root on
# the dev machine; then run.sh on the device with carry [".device"]):
# .device/v/{base,s16,s4,s16f,coal}/kvfabric.xz, .device/master.test.xz
# and .device/v/versions.txt.
#   base = 43b228b (64 KiB minimum slices; no --scatter)
#   s16  = this checkout's HEAD (16 KiB minimum slices, --scatter)
#   s4   = s16 with minKernelSlice = 4 KiB
#   s16f = s16 with the put pipeline's first chunk c/16 (32 keys)
#   coal = s16 with coalesce.patch (adjoining copies merged)
set -euo pipefail
P=docs/perf/logs-2026-12-04-s19/run3
W=$(mktemp -d)
trap 'for v in base s16; do git worktree remove --force "$W/$v" 2>/dev/null || true; done; rm -rf "$W"' EXIT
git worktree add -q "$W/base" 43b228b
git worktree add -q "$W/s16" HEAD
rm -rf .device/v && mkdir -p .device/v
echo "base 43b228b; s16/s4/s16f/coal from $(git rev-parse --short HEAD)" > .device/v/versions.txt
build() { mkdir -p ".device/v/$2"; (cd "$1" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/v/$2/kvfabric" ./cmd/kvfabric); }
build "$W/base" base
build "$W/s16" s16
sed -i 's/^const minKernelSlice = 16 << 10/const minKernelSlice = 4 << 10/' "$W/s16/internal/transfer/transfer.go"
build "$W/s16" s4
git -C "$W/s16" checkout -q -- .
sed -i 's|return chunker{size: max(c/8, 1), max: c}|return chunker{size: max(c/16, 1), max: c}|' "$W/s16/internal/client/ops.go"
build "$W/s16" s16f
git -C "$W/s16" checkout -q -- .
git -C "$W/s16" apply "$PWD/$P/coalesce.patch"
build "$W/s16" coal
(cd "$W/base" && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master.test" ./internal/master)
xz -T0 -3 -f .device/v/*/kvfabric .device/master.test
du -sh .device
