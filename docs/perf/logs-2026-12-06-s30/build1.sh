#!/usr/bin/env bash
# Session 30 run 1's build (from the repository root; then run1.sh with
# carry [".device"]): HEAD's kvfabric, libkvfabric.so and client test
# binary (gets carry lease releases), and libkvfabric.so and client test
# binary of 5a34405 (prev: session 29's main, releases by their own call
# only). Prev's Python client runs against HEAD's master process (a client
# that carries nothing gets what a prev master does): the carry limit
# (64 MiB with the tree) leaves no room for a second kvfabric.
set -euo pipefail
PREV=5a34405
rm -rf .device && mkdir -p .device
build() { # $1: source tree, $2: suffix
  (cd "$1" && CGO_ENABLED=1 go build -ldflags='-s -w' -buildmode=c-shared -o "$OLDPWD/.device/libkvfabric$2.so" ./capi &&
    go test -c -ldflags='-s -w' -o "$OLDPWD/.device/client$2.test" ./internal/client)
}
go build -tags kvfabric_noembed -ldflags='-s -w' -o .device/kvfabric ./cmd/kvfabric
build . ""
P=$(mktemp -d) && git worktree add -q --detach "$P/src" $PREV
build "$P/src" -prev
git worktree remove --force "$P/src" && rm -rf "$P"
rm -f .device/*.h
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo ' (with local changes)'); prev $PREV" > .device/version.txt
xz -T0 -9 -f .device/kvfabric* .device/libkvfabric*.so .device/*.test
du -sh .device
