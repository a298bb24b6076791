#!/usr/bin/env bash
# Session 12 run B: where the embedded put path's time goes at 4-16 KiB.
# kvfabric-exp = b39a717 + exp-lockstats.patch: the master's PutStart and
# PutEnd lock wait and hold times per key (KVF_EXP_LOCKSTATS=1, printed at
# the Service's Close, one size per run) and KVF_EXP_NOENDER=1 (PutEnd
# inline, no ender goroutine). Variants: base, GOGC=400, GOGC=off, noender;
# three interleaved reps; one gctrace run; the master benchmarks on the
# host CPU.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric-exp "$D"/master.test
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
B="$D/kvfabric-exp bench --store --driver cuda --paths go-embedded"
for rep in 1 2 3; do
  for sz in 4KiB 16KiB; do
    st base-$sz-$rep env KVF_EXP_LOCKSTATS=1 $B --sizes $sz --json "$L/base-$sz-$rep.json"
    st gc400-$sz-$rep env KVF_EXP_LOCKSTATS=1 GOGC=400 $B --sizes $sz --json "$L/gc400-$sz-$rep.json"
    st gcoff-$sz-$rep env KVF_EXP_LOCKSTATS=1 GOGC=off $B --sizes $sz --json "$L/gcoff-$sz-$rep.json"
    st noender-$sz-$rep env KVF_EXP_LOCKSTATS=1 KVF_EXP_NOENDER=1 $B --sizes $sz --json "$L/noender-$sz-$rep.json"
  done
done
st gctrace-4KiB env GODEBUG=gctrace=1 $B --sizes 4KiB
st timeline-4KiB env KVF_EXP_LOCKSTATS=1 $B --sizes 4KiB --gpu-times --json "$L/timeline-4KiB.json"
st mbench "$D/master.test" -test.run '^$' -test.bench 'BenchmarkPutRounds' -test.count 3 -test.cpuprofile "$L/mbench.pprof"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
