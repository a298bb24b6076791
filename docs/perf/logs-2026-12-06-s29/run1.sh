#!/usr/bin/env bash
# Session 29 run 1 (build1.sh at 9df9295: session 28's final code, spinning
# waits yield the CPU, at least one spinner per process; and an idle
# connection (two misses in a row) skips its spin). Session 28's
# run5.sh with more rounds: spin against none, interleaved — go-remote
# 4-64 KiB (x2), BenchmarkGetLatency fast-proc vs -nospin (x3), one get
# from Python (x3; and with both ends spinning 200 us); then the goals table once (every path and size).
# The master's spin in CPU: BenchmarkFastSpinCPU, head (an idle connection
# skips its spin) against prev (x2 interleaved).
# Session 27's parts over cores (8962faa, cherry-picked onto head as
# master-parts.test, branch s29-parts-trial): BenchmarkLoopbackOneCaller at
# 4096 keys, head against parts (x3 interleaved).
# BenchmarkGetLatency now tags its slowest 1% (tail-*: spin miss, lease
# release in flight, GC).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric .device/*.test
D=$PWD/.device K=$PWD/.device/kvfabric
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$K
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; cat /sys/devices/system/cpu/cpuidle/current_governor* /sys/devices/system/cpu/cpuidle/current_driver; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
PR='BenchmarkPutRounds/live=0/size=4096/prep=uniform'
(cd internal/master && st putrounds-before "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
for rep in 1 2; do
  st remote-spin-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB --json "$L/remote-spin-$rep.json"
  st remote-nospin-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB --fast-spin 0 --json "$L/remote-nospin-$rep.json"
done
pack
for rep in 1 2 3; do
  (cd internal/client && st golat-$rep "$D/client.test" -test.run XXX -test.bench 'BenchmarkGetLatency/fast-proc' -test.benchtime 20000x)
done
pack
export KVFABRIC_LAT_N=10000
for rep in 1 2 3; do
  mkdir -p "$L/pylat-spin-$rep" "$L/pylat-nospin-$rep" "$L/pylat-spin200-$rep"
  OUT=$L/pylat-spin-$rep st pylat-spin-$rep scripts/device-latency.sh
  OUT=$L/pylat-nospin-$rep KVFABRIC_LAT_CFG='{"master_fast_path_spin": "0"}' KVFABRIC_LAT_MASTER_ARGS="--fast-spin 0" st pylat-nospin-$rep scripts/device-latency.sh
  OUT=$L/pylat-spin200-$rep KVFABRIC_LAT_CFG='{"master_fast_path_spin": "200us"}' KVFABRIC_LAT_MASTER_ARGS="--fast-spin 200us" st pylat-spin200-$rep scripts/device-latency.sh
  pack
done
for rep in 1 2; do
  for v in master master-prev; do
    (cd internal/master && st spincpu-$v-$rep "$D/$v.test" -test.run XXX -test.bench BenchmarkFastSpinCPU -test.benchtime 5000x)
  done
done
pack
LB='BenchmarkLoopbackOneCaller/rpc=(GetReplicas|PutStartUniform)/client=(grpc|fast)/keys=4096'
for rep in 1 2 3; do
  for v in master master-parts; do
    (cd internal/master && st loopback-$v-$rep "$D/$v.test" -test.run XXX -test.bench "$LB" -test.benchtime 200x)
  done
done
pack
st all-1 $K bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-1.json"
(cd internal/master && st putrounds-after "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"; grep -hE "^Benchmark" "$L"/putrounds-*.log | sed 's/ *\t */ /g'
grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//'
for f in "$L"/spincpu-*.log; do echo "== $(basename $f .log)"; grep -E "^Bench" "$f" | sed 's/ *\t */ /g'; done
for f in "$L"/loopback-*.log; do echo "== $(basename $f .log)"; grep -E "^Bench" "$f" | sed 's/ *\t */ /g'; done
for f in "$L"/golat-*.log; do grep -E "^Bench" "$f" | sed 's/ *\t */ /g'; done
for f in "$L"/pylat-*.log; do echo "== $(basename $f .log)"; grep -E "remote-store|  store-ptr|torch-copy" "$f"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
