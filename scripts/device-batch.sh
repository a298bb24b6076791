#!/usr/bin/env bash
# device-batch.sh runs kvfabric's device batch on a GPU machine: the layout
# check against the real cuda.h, `kvfabric doctor`, and the test binaries
# (real-driver tests enabled with KVFABRIC_GPU_TESTS=1). See docs/device.md.
#
# Run it from the repository root after `make device` put everything in
# .device/:   OUT=/some/log/dir scripts/device-batch.sh [TEST_REGEX]
#
# TEST_REGEX selects test binaries by name (default: all, the real-driver
# ones first). Every step writes $OUT/<step>.log; $OUT/summary.log lists each
# step with its exit status. The script exits 1 if any step failed.
set -u -o pipefail

DEV=$(cd "${DEVICE_DIR:-.device}" && pwd) || { echo "no ${DEVICE_DIR:-.device}/: run make device first" >&2; exit 2; }
OUT=${OUT:-$PWD/device-logs}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$PWD
ONLY=${1:-.}
CUDA_INCLUDE=${CUDA_INCLUDE:-/usr/local/cuda/include}
TEST_TIMEOUT=${TEST_TIMEOUT:-5m}

export KVFABRIC_GPU_TESTS=1 PYTHONUNBUFFERED=1
# Shared multi-GPU hosts: never NVLink SHARP / multicast.
export NCCL_NVLS_ENABLE=0

failed=0
# step NAME CMD...: run CMD, tee its output to $OUT/NAME.log, record status.
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

step env bash -c 'uname -a; ldd --version | head -1; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv || true; ls -l /dev/nvidia-caps-imex-channels 2>&1 || true'

step layoutcheck bash -c "gcc -std=gnu11 -Wall -I'$CUDA_INCLUDE' -o '$OUT/layoutcheck' '$DEV/cuda/testdata/layoutcheck.c' && '$OUT/layoutcheck'"

step doctor "$DEV/kvfabric" doctor --driver=cuda
step doctor-json "$DEV/kvfabric" doctor --driver=cuda --json

# Test binaries run in their package directory (testdata is relative).
# The real-driver package goes first.
run_test() {
	local bin=$1 dir=$2
	(cd "$ROOT/$dir" && "$DEV/$bin" -test.v -test.count=1 -test.timeout="$TEST_TIMEOUT")
}
if [ -f "$DEV/tests.txt" ]; then
	{ grep '^internal_cuda\.test ' "$DEV/tests.txt"; grep -v '^internal_cuda\.test ' "$DEV/tests.txt"; } |
		while read -r bin dir; do
			[[ $bin =~ $ONLY ]] || continue
			step "${bin%.test}" run_test "$bin" "$dir"
			echo "$failed" > "$OUT/.failed"
		done
	[ -f "$OUT/.failed" ] && failed=$(( failed | $(cat "$OUT/.failed") )) && rm -f "$OUT/.failed"
fi

echo "== device batch: $([ "$failed" -eq 0 ] && echo PASS || echo FAIL)" | tee -a "$OUT/summary.log"
exit "$failed"
