#!/usr/bin/env bash
# Builds what run.sh needs into .device/ (run from the repository root on
# the dev machine; then run.sh on the device with carry [".device"]):
# .device/v/{base,s16,s4,s16f}/kvfabric.xz and .device/master.test.xz.
#   base = 43b228b (64 KiB slices)
#   s16  = e254a4b (launchShape's 16 KiB minimum slice)
#   s4   = s16 with minKernelSlice = 4 KiB
#   s16f = s16 with the put pipeline's first chunk c/16 (32 keys)
set -euo pipefail
W=$(mktemp -d)
trap 'git worktree remove --force "$W/base"; git worktree remove --force "$W/s16"; rm -rf "$W"' EXIT
git worktree add -q "$W/base" 43b228b
git worktree add -q "$W/s16" e254a4b
rm -rf .device/v && mkdir -p .device/v
build() { (cd "$1" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$2" ./cmd/kvfabric); }
for v in base s16; do mkdir -p .device/v/$v; build "$W/$v" "$PWD/.device/v/$v/kvfabric"; done
sed -i 's/^const minKernelSlice = 16 << 10/const minKernelSlice = 4 << 10/' "$W/s16/internal/transfer/transfer.go"
mkdir -p .device/v/s4; build "$W/s16" "$PWD/.device/v/s4/kvfabric"
git -C "$W/s16" checkout -q -- internal/transfer/transfer.go
sed -i 's|return chunker{size: max(c/8, 1), max: c}|return chunker{size: max(c/16, 1), max: c}|' "$W/s16/internal/client/ops.go"
mkdir -p .device/v/s16f; build "$W/s16" "$PWD/.device/v/s16f/kvfabric"
(cd "$W/base" && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master.test" ./internal/master)
xz -T0 -3 -f .device/v/*/kvfabric .device/master.test
du -sh .device
