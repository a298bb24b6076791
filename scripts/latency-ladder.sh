#!/usr/bin/env bash
# The latency ladder of one small get through a remote master (issue 13,
# item 4; docs/perf/latency.md, "dev VM ladder"): the same 4 KiB get, or
# the master call under it, measured at each layer from a raw gRPC call to
# Python, against a master on TCP loopback, with the simulator driver (no
# GPU: the copy is a memmove). Every rung prints Go benchmark lines with
# p50-us / p99-us over the individual calls, so benchstat compares runs.
#
#   scripts/latency-ladder.sh            build, then run every rung into $OUT
#   scripts/latency-ladder.sh build      build only, into $BIN
#   scripts/latency-ladder.sh run        run only, from $BIN (a machine
#                                        without Go: the GPU host)
#
# Rungs (files in $OUT):
#   master.txt  go test -bench BenchmarkLatency ./internal/master: exists and
#               getreplicas, master embedded / in this process over gRPC /
#               in a child process over gRPC / the same over its fast path
#               (fast-proc), each also from a locked thread
#   client.txt  go test -bench BenchmarkGetLatency ./internal/client:
#               client.Store.Get, the same masters
#   cabi.txt    scripts/latency-cabi.c: kvfabric_exists and kvfabric_get
#               through libkvfabric.so from C threads (main, a pthread),
#               `kvfabric master` in a separate process (its fast path:
#               master_fast_path defaults to true)
#   cabi-grpc.txt  the same with master_fast_path false (gRPC only)
#   python.txt  scripts/latency-ladder.py: Store.exists, the bare ctypes
#               kvfabric_get, Store.get, the same master (and embedded)
#   env.txt     machine, load before and after
#
# Environment: OUT (default /tmp/ladder), BIN (default build/ladder), COUNT
# (runs per rung, default 6), N (calls per run, default 3000), CC (default
# cc), PYTHON (default python3).
#
# On the GPU host, after `BIN=.device/ladder scripts/latency-ladder.sh build`
# on the dev machine (carry .device/ladder.tar.gz only):
#   BIN=.device/ladder OUT=$OUT scripts/latency-ladder.sh run
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/ladder}"
BIN="${BIN:-build/ladder}"
COUNT="${COUNT:-6}"
N="${N:-3000}"
CC="${CC:-cc}"
PYTHON="${PYTHON:-python3}"
mode="${1:-all}"

# build puts stripped binaries into $BIN and records the commit they were
# built from, and packs them into $BIN.tar.gz (about 35 MiB; $BIN itself,
# about 80 MiB, is over what a device call carries): run unpacks it when
# $BIN is missing.
build() {
    mkdir -p "$BIN"
    local ld=(-ldflags='-s -w')
    go test -c "${ld[@]}" -o "$BIN/master.test" ./internal/master
    go test -c "${ld[@]}" -o "$BIN/client.test" ./internal/client
    CGO_ENABLED=1 go build "${ld[@]}" -buildmode=c-shared -o "$BIN/libkvfabric.so" ./capi
    go build -tags kvfabric_noembed "${ld[@]}" -o "$BIN/kvfabric" ./cmd/kvfabric
    rm -f "$BIN/libkvfabric.h" "$BIN/latency-cabi"
    echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' ':!scripts/latency-ladder.sh' || echo ' (with local changes)')" > "$BIN/commit"
    tar -C "$(dirname "$BIN")" -czf "$BIN.tar.gz" "$(basename "$BIN")"
    du -sh "$BIN" "$BIN.tar.gz"
}

run() {
    mkdir -p "$OUT"
    if [ ! -e "$BIN/master.test" ] && [ -e "$BIN.tar.gz" ]; then
        tar -C "$(dirname "$BIN")" -xzf "$BIN.tar.gz"
    fi
    local bin
    bin="$(cd "$BIN" && pwd)"
    if [ ! -x "$bin/latency-cabi" ] || [ scripts/latency-cabi.c -nt "$bin/latency-cabi" ]; then
        "$CC" -O2 -I capi scripts/latency-cabi.c "$bin/libkvfabric.so" -Wl,-rpath,"$bin" -lpthread -o "$bin/latency-cabi"
    fi
    {
        echo "date: $(date -u +%FT%TZ)"
        echo "binaries: $BIN, built from $(cat "$bin/commit" 2>/dev/null || echo 'an unrecorded commit')"
        echo "uname: $(uname -srm)"
        echo "cpus: $(nproc)"
        echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    } > "$OUT/env.txt"
    local bench=(-test.run '^$' -test.benchtime "${N}x" -test.count "$COUNT")
    (cd internal/master && "$bin/master.test" -test.bench '^BenchmarkLatency$' "${bench[@]}") | tee "$OUT/master.txt"
    (cd internal/client && "$bin/client.test" -test.bench '^BenchmarkGetLatency$' "${bench[@]}") | tee "$OUT/client.txt"

    # The C and Python rungs against a `kvfabric master` process.
    local dir addr
    dir="$(mktemp -d)"
    "$bin/kvfabric" master --listen 127.0.0.1:0 --addr-file "$dir/addr" --metrics-listen "" >"$dir/master.log" 2>&1 &
    local mpid=$!
    trap 'kill $mpid 2>/dev/null || true' EXIT
    for _ in $(seq 200); do [ -s "$dir/addr" ] && break; sleep 0.05; done
    addr="$(cat "$dir/addr")"
    local cfg
    cfg='{"driver":"sim","protocol":"nvlink","master_server_addr":"'"$addr"'","enable_egm_store_pool":true,"global_segment_size":"64MiB","local_buffer_size":0,"local_hostname":"ladder","socket_dir":"'"$dir"'"}'
    : > "$OUT/cabi.txt"
    : > "$OUT/cabi-grpc.txt"
    for _ in $(seq "$COUNT"); do
        "$bin/latency-cabi" "$cfg" "$N" | tee -a "$OUT/cabi.txt"
        "$bin/latency-cabi" "${cfg%\}},\"master_fast_path\":false}" "$N" | tee -a "$OUT/cabi-grpc.txt"
    done
    kill "$mpid"; wait "$mpid" 2>/dev/null || true
    trap - EXIT
    : > "$OUT/python.txt"
    for _ in $(seq "$COUNT"); do
        KVFABRIC_LIB="$bin/libkvfabric.so" KVFABRIC_BIN="$bin/kvfabric" "$PYTHON" scripts/latency-ladder.py "$N" | tee -a "$OUT/python.txt"
    done
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
    cat "$OUT/env.txt"
}

case "$mode" in
build) build ;;
run) run ;;
all) build; run ;;
*) echo "usage: $0 [build|run]" >&2; exit 2 ;;
esac
