#!/usr/bin/env bash
# Device batch E (session 9): where a 4 KiB / 16 KiB embedded put's time
# goes at 6a156ae (the session's final put path): a CPU profile and an
# execution trace of put+get rounds. (The trace's sync/sched summaries,
# trace4k-{sync,sched}-top.txt, and cpu4k-top.txt were made afterwards on
# the dev VM with go tool trace / pprof and the unstripped binary.)
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric*
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
st prof4k "$D/kvfabric-sym" bench --store --driver cuda --paths go-embedded --sizes 4KiB --iters 8 --cpuprofile "$L/cpu4k.pprof"
st trace4k "$D/kvfabric-sym" bench --store --driver cuda --paths go-embedded --sizes 4KiB --iters 3 --trace "$L/trace4k.out"
st prof16k "$D/kvfabric-sym" bench --store --driver cuda --paths go-embedded --sizes 16KiB --iters 8 --cpuprofile "$L/cpu16k.pprof"
ls -la "$L" >> "$L/summary.txt"
gzip "$L/trace4k.out"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
