#!/usr/bin/env bash
# mooncake-upstream-tests.sh runs Mooncake's own store tests, unmodified,
# against kvfabric's Mooncake facade (the `mooncake` shim package):
# mooncake-wheel/tests/test_distributed_object_store.py and
# test_replicated_distributed_object_store.py at a pinned Mooncake commit.
#
#   make mooncake-upstream-test        (builds build/kvfabric and build/libkvfabric.so first)
#   scripts/mooncake-upstream-tests.sh [COMMIT]
#
# As upstream's scripts/run_tests.sh does, it starts one master with a short
# lease TTL (here `kvfabric master`, 500 ms) and runs each file with
# `python3 FILE` (unittest, upstream's order), with DEFAULT_KV_LEASE_TTL
# equal to the master's. KVFABRIC_CONFIG points the facade at the simulator.
# The files are fetched from raw.githubusercontent.com, else taken from a
# local Mooncake mirror (MOONCAKE_MIRROR, a git directory); with neither it
# prints SKIPPED and exits 0. Logs: build/mooncake-tests/*.log. Exits 1 if a
# file fails.
set -u -o pipefail

COMMIT=${1:-3b5a594133958449a1feaf1c9e0fc1b553e34a28}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build
DIR=$BUILD/mooncake-tests
MIRROR=${MOONCAKE_MIRROR:-/work/.mirror/kvcache-ai+Mooncake/repo}
FILES="test_distributed_object_store.py test_replicated_distributed_object_store.py"
PYTHON=${PYTHON:-python3}
LEASE_MS=500

for f in "$BUILD/kvfabric" "$BUILD/libkvfabric.so"; do
	[ -e "$f" ] || { echo "missing $f: run make mooncake-upstream-test (or make python-test) first" >&2; exit 2; }
done
mkdir -p "$DIR"

# fetch FILE: $DIR/FILE at $COMMIT, from GitHub or the mirror.
fetch() {
	local f=$1 url="https://raw.githubusercontent.com/kvcache-ai/Mooncake/$COMMIT/mooncake-wheel/tests/$1"
	if curl -fsSL --max-time 20 -o "$DIR/$f.tmp" "$url" 2>/dev/null; then
		mv "$DIR/$f.tmp" "$DIR/$f" && echo "fetched $f from $url" && return 0
	fi
	rm -f "$DIR/$f.tmp"
	if [ -d "$MIRROR" ] && git -C "$MIRROR" show "$COMMIT:mooncake-wheel/tests/$f" > "$DIR/$f.tmp" 2>/dev/null; then
		mv "$DIR/$f.tmp" "$DIR/$f" && echo "fetched $f at $COMMIT from the mirror $MIRROR" && return 0
	fi
	rm -f "$DIR/$f.tmp"
	return 1
}
for f in $FILES; do
	if ! fetch "$f"; then
		echo "SKIPPED: cannot fetch Mooncake tests (no network, no mirror at $MIRROR)"
		exit 0
	fi
done

port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
ADDR=127.0.0.1:$port
SOCKETS=$(mktemp -d)
"$BUILD/kvfabric" master --listen "$ADDR" --metrics-listen "" --lease-ttl "${LEASE_MS}ms" \
	> "$DIR/master.log" 2>&1 &
MASTER=$!
cleanup() { kill "$MASTER" 2>/dev/null; wait "$MASTER" 2>/dev/null; rm -rf "$SOCKETS"; }
trap cleanup EXIT
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done

export MASTER_SERVER=$ADDR DEFAULT_KV_LEASE_TTL=$LEASE_MS MC_METADATA_SERVER=http://127.0.0.1:8080/metadata
export KVFABRIC_LIB=$BUILD/libkvfabric.so
export KVFABRIC_CONFIG="{\"driver\": \"sim\", \"socket_dir\": \"$SOCKETS\"}"
export PYTHONPATH=$ROOT/python:$ROOT/python/mooncake-shim${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

failed=0
for f in $FILES; do
	log=$DIR/${f%.py}.log
	echo "== $f (log: $log)"
	(cd "$DIR" && "$PYTHON" "$f") > "$log" 2>&1
	rc=$?
	grep -E '^(Ran|OK|FAILED)' "$log" | sed 's/^/   /'
	[ $rc -eq 0 ] || failed=1
done
exit $failed
