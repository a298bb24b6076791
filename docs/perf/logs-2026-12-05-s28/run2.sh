#!/usr/bin/env bash
# Session 28 run 2 (build2.sh). Part A, the fast path's spin (head, spin
# on by default against off), interleaved: BenchmarkGetLatency fast-proc
# against fast-proc-nospin (Go, sim driver, master in a child process;
# 20,000 gets each, x3); one get from Python on the GPU
# (scripts/device-latency.sh, 10,000 gets per row, x3) with the defaults
# against master_fast_path_spin 0 and --fast-spin 0; go-remote Store
# 4-256 KiB with the defaults against --fast-spin 0 (x2), for what spinning
# does to batches. Part B, session 27's uniform puts on a lab host: the
# one-caller loopback calls at 4096 keys (head: items and uniform, x3),
# go-remote 4-256 KiB head against prev (x2), go-remote with pipeline
# chunks 1024 and 2048 (x2), and the host's speed (BenchmarkPutRounds).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz .device/*/*.xz
chmod +x .device/kvfabric .device/*.test .device/prev/kvfabric
D=$PWD/.device K=$PWD/.device/kvfabric
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$K
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; grep -H . /sys/devices/system/cpu/cpuidle/* /sys/devices/system/cpu/cpu0/cpuidle/state*/name /sys/devices/system/cpu/cpu0/cpuidle/state*/latency; systemd-detect-virt; uname -r; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
PR='BenchmarkPutRounds/live=0/size=4096/prep=uniform'
(cd internal/master && st putrounds-before "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
for rep in 1 2 3; do
  (cd internal/client && st golat-$rep "$D/client.test" -test.run XXX -test.bench 'BenchmarkGetLatency/fast-proc' -test.benchtime 20000x)
done
pack
export KVFABRIC_LAT_N=10000
for rep in 1 2 3; do
  mkdir -p "$L/pylat-spin-$rep" "$L/pylat-nospin-$rep"
  OUT=$L/pylat-spin-$rep st pylat-spin-$rep scripts/device-latency.sh
  OUT=$L/pylat-nospin-$rep KVFABRIC_LAT_CFG='{"master_fast_path_spin": "0"}' KVFABRIC_LAT_MASTER_ARGS="--fast-spin 0" st pylat-nospin-$rep scripts/device-latency.sh
  pack
done
unset KVFABRIC_LAT_N
for rep in 1 2; do
  st remote-spin-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/remote-spin-$rep.json"
  st remote-nospin-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB,256KiB --fast-spin 0 --json "$L/remote-nospin-$rep.json"
  pack
done
echo "== part A done at ${SECONDS}s" >> "$L/summary.txt"
LB='BenchmarkLoopbackOneCaller/rpc=(PutStart|PutStartUniform|GetReplicas)/client=(fast|grpc)/keys=4096'
(cd internal/master && st loopback-head "$D/master.test" -test.run XXX -test.bench "$LB" -test.benchtime 200x -test.count 3)
for rep in 1 2; do
  st s27-remote-prev-$rep "$D/prev/kvfabric" bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/s27-remote-prev-$rep.json"
  st s27-remote-head-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/s27-remote-head-$rep.json"
  for ch in 1024 2048; do
    st s27-remote-chunk$ch-$rep $K bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB --pipeline-chunk $ch --json "$L/s27-remote-chunk$ch-$rep.json"
  done
  pack
done
(cd internal/master && st putrounds-after "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
pack
cat "$L/summary.txt"
grep -hE "^Benchmark" "$L"/putrounds-*.log | sed 's/ *\t */ /g'
for f in "$L"/golat-*.log; do grep -E "^Bench" "$f" | sed 's/ *\t */ /g' | awk -v f="$(basename $f .log)" '{printf "%s %s", f, $1; for (i=4;i<=NF;i+=2) if ($(i+1) ~ /p50|p90|p99|meta|spin/) printf " %s=%s", $(i+1), $i; print ""}'; done
for f in "$L"/pylat-*.log; do echo "== $(basename $f .log)"; grep -E "remote-store|  store-ptr|torch-copy" "$f"; done
for f in "$L"/remote-*.log "$L"/s27-*.log; do grep -E "^  1gpu" "$f" | awk -v f="$(basename $f .log)" '{print f, $2, $3, $4, $10}'; done
grep -E "^Benchmark" "$L/loopback-head.log" | awk '{print $1, $(NF-1), $NF}'
grep -m1 "Product Name" "$L/nvidia-smi.log"; head -12 "$L/host.txt"
