#!/usr/bin/env bash
# Session 30 run 1's build (from the repository root; then run1.sh with
# carry [".device"]): HEAD's kvfabric, libkvfabric.so and client and
# master test binaries (gets carry lease releases), and the same of
# 5a34405 (prev: session 29's main, releases by their own call only).
set -euo pipefail
PREV=5a34405
rm -rf .device && mkdir -p .device
build() { # $1: source tree, $2: suffix
  (cd "$1" && go build -tags kvfabric_noembed -ldflags='-s -w' -o "$OLDPWD/.device/kvfabric$2" ./cmd/kvfabric &&
    CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/libkvfabric$2.so" ./capi &&
    go test -c -ldflags='-s -w' -o "$OLDPWD/.device/client$2.test" ./internal/client &&
    go test -c -ldflags='-s -w' -o "$OLDPWD/.device/master$2.test" ./internal/master)
}
build . ""
P=$(mktemp -d) && git worktree add -q --detach "$P/src" $PREV
build "$P/src" -prev
git worktree remove --force "$P/src" && rm -rf "$P"
rm -f .device/*.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -9 -f .device/kvfabric* .device/libkvfabric*.so .device/*.test
du -sh .device
