#!/usr/bin/env bash
# Builds what run.sh needs into .device/ (run from the repository root on
# the dev machine; then run.sh on the device with carry [".device"]):
# session 20's run1 build (base, s19, head, s4, s16f, the gated test
# binaries, libkvfabric.so; head = HEAD, now with eviction by a clock),
# plus
#   .device/v/s20/kvfabric.xz   s20 = 1464c46 (session 20's end: eviction
#                               samples 16 random members per victim)
#   .device/master-steps.test.xz  HEAD with watermark-steps.patch (watermark
#                               eviction in steps: tried on the dev VM, not kept)
set -euo pipefail
bash docs/perf/logs-2026-12-04-s20/run1/build.sh
W=$(mktemp -d)
trap 'for v in s20 steps; do git worktree remove --force "$W/$v" 2>/dev/null || true; done; rm -rf "$W"' EXIT
git worktree add -q "$W/s20" 1464c46
mkdir -p .device/v/s20
(cd "$W/s20" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/v/s20/kvfabric" ./cmd/kvfabric)
git worktree add -q "$W/steps" HEAD
git -C "$W/steps" apply "$PWD/docs/perf/logs-2026-12-05-s21/run1/watermark-steps.patch"
(cd "$W/steps" && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master-steps.test" ./internal/master)
xz -T0 -3 -f .device/v/s20/kvfabric .device/master-steps.test
echo "s20 1464c46" >> .device/v/versions.txt
du -sh .device
