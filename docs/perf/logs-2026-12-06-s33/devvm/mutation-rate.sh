#!/usr/bin/env bash
# Session 33: how often the stopped-writer tests catch a master that frees
# a revoked put's range at once (the old master's behaviour): the mutation
# in a scratch worktree of HEAD, then TestStoppedWriterParts and
# TestStoppedWriterPartsRegions five times each (from the repository root).
set -u
root=$PWD
tmp=$(mktemp -d); git worktree add -q "$tmp" HEAD
git rev-parse --short HEAD
python3 - "$tmp/internal/master/service.go" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
old = "\ts.mu.timedOut[o.token] = slot\n\ts.met.putTimeouts.Inc()\n}"
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "\ts.mu.timedOut[o.token] = slot\n\ts.met.putTimeouts.Inc()\n\ts.freeObjectLocked(slot, s.now())\n}"))
PY
cd "$tmp" && go test -c -o client.test ./internal/client && cd internal/client
for t in TestStoppedWriterParts TestStoppedWriterPartsRegions; do
	for i in 1 2 3 4 5; do
		echo "=== $t run $i"
		../../client.test -test.run "^$t\$" -test.count=1 -test.v 2>&1 | grep -E '^(--- )|_test.go:[0-9]+:' | sed -E 's/; writer A:.*//' | cut -c1-240
	done
done
cd "$root" && git worktree remove --force "$tmp"
