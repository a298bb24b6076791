#!/usr/bin/env bash
# Builds what run.sh needs into .device/ (run from the repository root on
# the dev machine; then run.sh on the device with carry [".device"]):
#   .device/v/{base,s19,s20,head,s4,s16f}/kvfabric.xz   bench binaries
#   .device/{cuda,transfer,master}.test.xz        gated GPU tests, loopback bench
#   .device/libkvfabric.so.xz                     the python path's library (head)
#   .device/v/versions.txt
# base = 43b228b (64 KiB minimum kernel slices, no merged copies)
# s19  = a9cb804 (session 19's end: 16 KiB slices; a worker for any batch of two chunks or more)
# s20  = 1464c46 (session 20's end: eviction samples 16 random members per victim)
# head = HEAD (16 KiB slices; copies merged; --separate-copies turns that off;
#        eviction by a clock)
# s4   = HEAD with minKernelSlice = 4 KiB
# s16f = HEAD with the put pipeline's first chunk c/16 (32 keys)
set -euo pipefail
W=$(mktemp -d)
trap 'for v in base s19 s20 head; do git worktree remove --force "$W/$v" 2>/dev/null || true; done; rm -rf "$W"' EXIT
git worktree add -q "$W/base" 43b228b
git worktree add -q "$W/s19" a9cb804
git worktree add -q "$W/s20" 1464c46
git worktree add -q "$W/head" HEAD
rm -rf .device && mkdir -p .device/v
echo "base 43b228b; s19 a9cb804; s20 1464c46; head/s4/s16f from $(git rev-parse --short HEAD)" > .device/v/versions.txt
build() { mkdir -p ".device/v/$2"; (cd "$1" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/v/$2/kvfabric" ./cmd/kvfabric); }
build "$W/base" base
build "$W/s19" s19
build "$W/s20" s20
build "$W/head" head
(cd "$W/head" && for p in cuda transfer master; do go test -c -ldflags='-s -w' -o "$OLDPWD/.device/$p.test" ./internal/$p; done)
(cd "$W/head" && CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/libkvfabric.so" ./capi)
sed -i 's/^const minKernelSlice = 16 << 10/const minKernelSlice = 4 << 10/' "$W/head/internal/transfer/transfer.go"
build "$W/head" s4
git -C "$W/head" checkout -q -- .
sed -i 's|return chunker{size: max(c/8, 1), max: c}|return chunker{size: max(c/16, 1), max: c}|' "$W/head/internal/client/ops.go"
build "$W/head" s16f
git -C "$W/head" checkout -q -- .
xz -T0 -3 -f .device/v/*/kvfabric .device/*.test .device/libkvfabric.so
du -sh .device
