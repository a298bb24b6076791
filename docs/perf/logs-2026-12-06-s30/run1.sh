#!/usr/bin/env bash
# Session 30 run 1 (build1.sh): gets that carry their lease releases
# (head) against releases by their own call (prev = 5a34405), on one host,
# interleaved:
#  - BenchmarkGetLatency embedded and fast-proc (x4 each; tail tags);
#  - one get from Python, embedded and remote (scripts/device-latency.sh,
#    N=10000, x4 each; the remote master is head's kvfabric for both);
#  - head's goals table once (every path and size).
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
for rep in 1 2 3 4; do
  for v in "" -prev; do
    (cd internal/client && st golat$v-$rep "$D/client$v.test" -test.run XXX -test.bench 'BenchmarkGetLatency/(embedded|fast-proc)$' -test.benchtime 20000x)
  done
done
pack
export KVFABRIC_LAT_N=10000
for rep in 1 2 3 4; do
  for v in "" -prev; do
    mkdir -p "$L/pylat$v-$rep"
    OUT=$L/pylat$v-$rep KVFABRIC_LIB=$D/libkvfabric$v.so KVFABRIC_BIN=$D/kvfabric st pylat$v-$rep scripts/device-latency.sh
  done
  pack
done
KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric st all-1 "$D/kvfabric" bench --store --driver cuda --paths go-embedded,go-remote,python --json "$L/all-1.json"
python3 docs/perf/logs-2026-12-04-s20/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
pack
cat "$L/summary.txt"
for f in "$L"/golat*.log; do echo "== $(basename $f .log)"; grep -E "^Bench" "$f" | sed 's/ *\t */ /g'; done
for f in "$L"/pylat*.log; do echo "== $(basename $f .log)"; grep -E "remote-store-ptr|^ *store-ptr|torch-copy" "$f"; done
grep -v "^$" "$L/ranges.txt" | sed 's/  merged.*//' | head -60
grep -m1 "Product Name" "$L/nvidia-smi.log"
