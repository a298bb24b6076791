#!/usr/bin/env bash
# Session 30 run 2 (build1.sh's .device plus HEAD's master test binary,
# see build2 in README): more rounds of run 1's A/B to tell whether
# carrying moves the p50 (run 1: p99 down, p50 within noise):
# BenchmarkGetLatency/fast-proc head vs prev x10 interleaved; one get from
# Python x4 each; BenchmarkGetCarry (in-process fast path and embedded)
# x3 on this host.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric* .device/*.test
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
for rep in $(seq 1 10); do
  for v in "" -prev; do
    (cd internal/client && st golat$v-$rep "$D/client$v.test" -test.run XXX -test.bench 'BenchmarkGetLatency/fast-proc$' -test.benchtime 20000x)
  done
done
pack
(cd internal/master && st getcarry "$D/master.test" -test.run XXX -test.bench BenchmarkGetCarry -test.benchtime 50000x -test.count 3)
pack
export KVFABRIC_LAT_N=10000
for rep in 1 2 3 4; do
  for v in -prev ""; do
    mkdir -p "$L/pylat$v-$rep"
    OUT=$L/pylat$v-$rep KVFABRIC_LIB=$D/libkvfabric$v.so KVFABRIC_BIN=$D/kvfabric st pylat$v-$rep scripts/device-latency.sh
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/golat*.log; do echo "$(basename $f .log) $(grep fast-proc $f | grep -o '[0-9.]* p50-us\|[0-9.]* p99-us\|[0-9.]* meta-us\|[0-9.]* tail-release\|[0-9.]* releases/op' | tr '\n' ' ')"; done
grep -E "^Bench" "$L/getcarry.log" | sed 's/ *\t */ /g' | sort
python3 docs/perf/logs-2026-12-05-s28/pylat.py "$OUT" | grep -E "remote|store-ptr|torch"
grep -m1 "Product Name" "$L/nvidia-smi.log"
