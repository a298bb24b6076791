#!/usr/bin/env bash
# device-store-profile.sh: where the Store's time goes below 1 MiB on a GPU
# machine (issue #13 item 2), from the repository root after `make device`:
#
#   OUT=/some/log/dir scripts/device-store-profile.sh
#
# With the lab's `run` tool: carry [".device"]. About 1-2 minutes.
#
# 1. bench-store-profile: `bench --store` go-embedded at PROFILE_SIZES
#    (default 4KiB,16KiB,64KiB; PROFILE_PATHS, default go-embedded) under --cpuprofile ($OUT/cpu.pprof; read it
#    here with `go tool pprof .device/kvfabric cpu.pprof` — it is symbolized).
# 2. bench-store-trace: the same at TRACE_SIZE (default 64KiB), 2 rounds,
#    under --trace ($OUT/trace.out; `go tool trace`): whether the pipeline's
#    master calls overlap the copies.
# 3. demo-<size>: `kvfabric demo` at 4 KiB and 64 KiB: the phase split.
# Everything also lands in $OUT/profile.tar.gz (the run tool brings back few
# files). PROFILE_ARGS adds flags to both bench runs.
set -u -o pipefail

DEV=$(cd "${DEVICE_DIR:-.device}" && pwd) || { echo "no .device/: run make device first" >&2; exit 2; }
OUT=${OUT:-$PWD/device-logs}
mkdir -p "$OUT/profile"
P=$OUT/profile
failed=0

step() {
	local name=$1
	shift
	echo "== $name: $*" | tee -a "$P/summary.log"
	local t0=$SECONDS
	"$@" >"$P/$name.log" 2>&1
	local rc=$?
	tail -n 30 "$P/$name.log"
	echo "== $name: rc=$rc ($((SECONDS - t0))s)" | tee -a "$P/summary.log"
	[ "$rc" -eq 0 ] || failed=1
}

nproc >"$P/env.txt"; lscpu >>"$P/env.txt" 2>&1; nvidia-smi >>"$P/env.txt" 2>&1
# shellcheck disable=SC2086 # PROFILE_ARGS is a list of flags
step bench-store-profile "$DEV/kvfabric" --cpuprofile "$P/cpu.pprof" bench --store --driver cuda \
	--paths "${PROFILE_PATHS:-go-embedded}" --sizes "${PROFILE_SIZES:-4KiB,16KiB,64KiB}" --json "$P/store.json" ${PROFILE_ARGS:-}
# shellcheck disable=SC2086
step bench-store-trace "$DEV/kvfabric" --trace "$P/trace.out" bench --store --driver cuda \
	--paths go-embedded --sizes "${TRACE_SIZE:-64KiB}" --iters 2 ${PROFILE_ARGS:-}
for b in 4KiB 64KiB; do
	step "demo-$b" "$DEV/kvfabric" demo --driver cuda --block "$b" --count 4096
done
tar -C "$OUT" -czf "$OUT/profile.tar.gz" profile
echo "== device store profile: $([ "$failed" -eq 0 ] && echo PASS || echo FAIL)"
exit "$failed"
