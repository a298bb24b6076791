#!/usr/bin/env bash
# Session 29 run 1's build (from the repository root; then run1.sh with
# carry [".device"]): HEAD's kvfabric, libkvfabric.so and the client and
# master packages' test binaries; and the master package's test binary of
# 18d47f3, HEAD's parent at 356200d (master-prev.test: before the idle connection's skip) with
# HEAD's BenchmarkFastSpinCPU written for its API (prev-spincpu.sed); and
# HEAD with session 27's parts over cores (master-parts.test).
set -euo pipefail
rm -rf .device && mkdir -p .device
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o .device/libkvfabric.so ./capi
rm -f .device/libkvfabric.h
go test -c -ldflags='-s -w' -o .device/client.test ./internal/client
go test -c -ldflags='-s -w' -o .device/master.test ./internal/master
P=$(mktemp -d) && git worktree add -q --detach "$P/src" 18d47f3
(cd "$P/src/internal/master" && sed -f "$OLDPWD/docs/perf/logs-2026-12-06-s29/prev-spincpu.sed" "$OLDPWD/internal/master/spincpu_bench_test.go" > spincpu_bench_test.go &&
  go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master-prev.test" .)
git worktree remove --force "$P/src" && rm -rf "$P"
# Session 27's parts over cores (8962faa) on HEAD: master-parts.test.
P=$(mktemp -d) && git worktree add -q --detach "$P/src" HEAD && (cd "$P/src" && git cherry-pick 8962faa > /dev/null)
(cd "$P/src/internal/master" && go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master-parts.test" .)
git worktree remove --force "$P/src" && rm -rf "$P"
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev 18d47f3; parts: 8962faa on head" > .device/version.txt
xz -T0 -9 -f .device/kvfabric .device/libkvfabric.so .device/client.test .device/master.test .device/master-prev.test .device/master-parts.test
du -sh .device
