#!/usr/bin/env bash
# Device batch C (session 9): the session's code (new = afb5c9a) against
# 62ce609 (old), interleaved x3, every round verified: the bench and a full
# store (--prefill); then the master's put benchmarks on the host CPU x3 for
# old, mid (904e206: the slack without the full-store re-key) and new.
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
for r in 1 2 3; do for v in old mid new; do
  st m-$v-$r "$D/m-$v.test" -test.run '^$' -test.bench 'BenchmarkPutRounds|BenchmarkPutFull' -test.benchtime 2s
done; done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
