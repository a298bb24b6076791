#!/usr/bin/env bash
# Session 30 run 3 (run 2's .device, head d0d1886's binaries only): is the
# garbage collector behind the remote get's remaining tail? Every Go
# runtime of the run (client, master) with GOGC=off against the default,
# interleaved: BenchmarkGetLatency/fast-proc x8; one get from Python x3
# (the Python process's runtime and the kvfabric master's).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/kvfabric.xz .device/libkvfabric.so.xz .device/client.test.xz
chmod +x .device/kvfabric .device/client.test
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
for rep in $(seq 1 8); do
  for g in 100 off; do
    (cd internal/client && GOGC=$g st golat-gogc$g-$rep "$D/client.test" -test.run XXX -test.bench 'BenchmarkGetLatency/fast-proc$' -test.benchtime 20000x)
  done
done
pack
export KVFABRIC_LAT_N=10000 KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric
for rep in 1 2 3; do
  for g in 100 off; do
    mkdir -p "$L/pylat-gogc$g-$rep"
    OUT=$L/pylat-gogc$g-$rep GOGC=$g st pylat-gogc$g-$rep scripts/device-latency.sh
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/golat*.log; do echo "$(basename $f .log) $(grep fast-proc $f | grep -o '[0-9.]* p50-us\|[0-9.]* p99-us\|[0-9.]* tail-[a-z]*' | tr '\n' ' ')"; done
for f in "$L"/pylat*.log; do echo "== $(basename $f .log)"; grep -E "remote-store|torch-copy" "$f"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
