#!/usr/bin/env bash
# Session 33: the mutation checks of the new tests, each in a scratch
# worktree of HEAD (from the repository root: bash
# docs/perf/logs-2026-12-06-s33/devvm/mutations.sh > .../mutations.txt 2>&1).
set -u
run() { # name file python-replace-old python-replace-new test-regexp
	local name=$1 file=$2 old=$3 new=$4 re=$5 tmp
	tmp=$(mktemp -d); git worktree add -q "$tmp" HEAD
	python3 - "$tmp/$file" "$old" "$new" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read()
assert s.count(old) == 1, f"{old!r} found {s.count(old)} times"
open(p, "w").write(s.replace(old, new))
PY
	echo "=== mutation: $name ($file)"
	(cd "$tmp" && go test ./internal/client -run "$re" -count=1 -v 2>&1 | grep -E '^(--- |ok|FAIL)|wrong|chunks' | cut -c1-400)
	git worktree remove --force "$tmp"
}
git rev-parse --short HEAD
run "post-copy lease check skipped" internal/client/ops.go \
	'if errs[l.i] == nil && now.After(l.expiry) {' 'if errs[l.i] == nil && now.After(l.expiry) && false {' \
	'^TestStoppedReaderPartsRegions$'
run "a revoked put's range freed at once by the master" internal/master/service.go \
	'	s.mu.timedOut[o.token] = slot
	s.met.putTimeouts.Inc()
}' '	s.mu.timedOut[o.token] = slot
	s.met.putTimeouts.Inc()
	s.freeObjectLocked(slot, s.now())
}' '^TestStoppedWriterPartsRegions$'
run "the client's put deadline check skipped" internal/client/store.go \
	'case s.reg.putTimeout > 0 && !now.Before(sent.Add(s.reg.putTimeout)):' 'case false && s.reg.putTimeout > 0 && !now.Before(sent.Add(s.reg.putTimeout)):' \
	'^(TestStoppedWriterPartsRegions|TestPutStreamPausedPastPutTimeout)$'
run "chunks of keys (chunkerFor ignores ce)" internal/client/ops.go \
	'c, ce := s.pipeChunk(), max(ce, 1)' 'c, ce := s.pipeChunk(), 1' \
	'^TestChunksCountCopyEngineRegions$'
run "chunks of keys, in the stopped-writer region test" internal/client/ops.go \
	'c, ce := s.pipeChunk(), max(ce, 1)' 'c, ce := s.pipeChunk(), 1' \
	'^TestStoppedWriterPartsRegions$'
