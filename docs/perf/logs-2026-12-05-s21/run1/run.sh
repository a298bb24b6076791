#!/usr/bin/env bash
# Session 21 run 1 (build.sh first; carry [".device"]). Parts A and B are
# session 20's run 1 (docs/perf/logs-2026-12-04-s20/run1/run.sh), unchanged.
# Part C (run.sh C): a full store (--prefill: every put evicts), 3
# interleaved rounds of head (eviction by a clock) and s20 (16 random
# members sampled per victim), go-embedded and go-remote, 4 KiB-16 MiB; and
# the master's full-store benchmarks on the host CPU, 3 interleaved rounds of
# HEAD and HEAD with watermark-steps.patch (BenchmarkPutFull,
# BenchmarkPutCallsFull, BenchmarkGetDuringFullPuts).
set -u
PART=${1:-A}
if [ "$PART" != C ]; then
  exec bash docs/perf/logs-2026-12-04-s20/run1/run.sh "$PART"
fi
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/head/kvfabric.xz .device/v/s20/kvfabric.xz .device/master.test.xz .device/master-steps.test.xz
chmod +x .device/v/*/kvfabric .device/master.test .device/master-steps.test
V=.device/v
st() { local n=$1; shift; local t0=$SECONDS; timeout 240 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
S="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB --paths go-embedded,go-remote --prefill"
for rep in 1 2 3; do
  st prefill-head-$rep $V/head/kvfabric bench --store --driver cuda $S --json "$L/prefill-head-$rep.json"
  st prefill-s20-$rep $V/s20/kvfabric bench --store --driver cuda $S --json "$L/prefill-s20-$rep.json"
done
for rep in 1 2 3; do
  for m in master master-steps; do
    (cd internal/master && st full-$m-$rep ../../.device/$m.test -test.run xxx -test.bench 'BenchmarkPutFull|BenchmarkPutCallsFull' -test.benchtime 1000x)
    (cd internal/master && st getduring-$m-$rep ../../.device/$m.test -test.run xxx -test.bench 'BenchmarkGetDuringFullPuts' -test.benchtime 20000x)
  done
done
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
