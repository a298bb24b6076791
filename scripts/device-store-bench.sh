#!/usr/bin/env bash
# device-store-bench.sh: `kvfabric bench --store` on a GPU machine (issue #13
# item 6), from the repository root after `make device`:
#
#   OUT=/some/log/dir scripts/device-store-bench.sh
#
# With the lab's `run` tool: carry [".device"], command
# `OUT=$OUT scripts/device-store-bench.sh`. About 2-3 minutes on H200 x2.
#
# 1. bench-store: Store-level put/get of 4 KiB .. 16 MiB objects, 256 MiB per
#    GPU per round in batches of <= 4096 keys, 1 warm-up + 3 timed rounds
#    (every round byte-verified), through the Go Store API with an embedded
#    master, with a `kvfabric master` process on loopback, and through the
#    Mooncake facade in python3 with torch CUDA tensors; GPU 0 alone, then
#    every GPU at once. Writes $OUT/store.json, $OUT/store.svg, $OUT/store.png
#    and the table to $OUT/bench-store.log.
# 2. bench-store-prefill: the Go paths again with --prefill (each store full
#    before the rounds, every put evicts): $OUT/store-prefill.json and
#    $OUT/bench-store-prefill.log.
# 3. crossstream: BenchmarkCrossStream of internal/transfer on the real
#    driver (small batches on one stream while another stream copies
#    256 MiB; issue #13 item 5), when .device/internal_transfer.test exists.
#
# BENCH_STORE_ARGS adds flags to step 1 (e.g. "--iters 5" or
# "--paths go-embedded"). $OUT/summary.log has each step's status.
set -u -o pipefail

DEV=$(cd "${DEVICE_DIR:-.device}" && pwd) || { echo "no .device/: run make device first" >&2; exit 2; }
OUT=${OUT:-$PWD/device-logs}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export KVFABRIC_LIB=${KVFABRIC_LIB:-$DEV/libkvfabric.so}
failed=0

step() {
	local name=$1
	shift
	echo "== $name: $*" | tee -a "$OUT/summary.log"
	local t0=$SECONDS
	"$@" 2>&1 | tee "$OUT/$name.log"
	local rc=$?
	echo "== $name: rc=$rc ($((SECONDS - t0))s)" | tee -a "$OUT/summary.log"
	[ "$rc" -eq 0 ] || failed=1
}

# shellcheck disable=SC2086 # BENCH_STORE_ARGS is a list of flags
step bench-store "$DEV/kvfabric" bench --store --driver cuda \
	--json "$OUT/store.json" --plot "$OUT/store.svg" ${BENCH_STORE_ARGS:-}
# The same plot as PNG, from the JSON just written (no second run).
if [ -f "$OUT/store.json" ]; then
	step plot-png "$DEV/kvfabric" bench --store --replot "$OUT/store.json" --plot "$OUT/store.png"
fi

# The same Go paths with a full store (--prefill: every put evicts), as a
# cache runs once it has filled; the python path is skipped there.
# shellcheck disable=SC2086 # BENCH_STORE_ARGS is a list of flags
step bench-store-prefill "$DEV/kvfabric" bench --store --driver cuda --prefill --paths go-embedded,go-remote \
	--json "$OUT/store-prefill.json" ${BENCH_STORE_ARGS:-}

if [ -x "$DEV/internal_transfer.test" ]; then
	step crossstream bash -c "cd internal/transfer && KVFABRIC_GPU_TESTS=1 '$DEV/internal_transfer.test' -test.run '^\$' -test.bench CrossStream -test.benchtime 3s -test.count 3"
fi

echo "== device store bench: $([ "$failed" -eq 0 ] && echo PASS || echo FAIL)" | tee -a "$OUT/summary.log"
exit "$failed"
