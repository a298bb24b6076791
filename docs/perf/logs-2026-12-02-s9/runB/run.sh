#!/usr/bin/env bash
# Device batch B (session 9): the session's code (new = 904e206: PutEnd on
# an ender for a batch's single pipeline, eviction's record layout, the
# placement slack) against 62ce609 (old), interleaved, every round
# verified: the bench x3, a full store (--prefill) x3, and the master's
# put benchmarks on the host CPU x2 (new also profiled once).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric-* "$D"/m-*.test
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for r in 1 2 3; do for v in old new; do
  KVFABRIC_LIB=$D/libkvfabric-$v.so st b-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/b-$v-$r.json"
  st p-$v-$r "$D/kvfabric-$v" bench --store --driver cuda --prefill --paths go-embedded,go-remote --sizes 4KiB,16KiB,64KiB,256KiB,1MiB --json "$L/p-$v-$r.json"
done; done
for r in 1 2; do for v in old new; do
  st m-$v-$r "$D/m-$v.test" -test.run '^$' -test.bench 'BenchmarkPutRounds|BenchmarkPutFull' -test.benchtime 2s
done; done
st m-new-prof "$D/m-new.test" -test.run '^$' -test.bench 'BenchmarkPutRounds/size=4096|BenchmarkPutFull/size=4096' -test.benchtime 3s -test.cpuprofile "$L/m-new.pprof"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
