#!/usr/bin/env bash
# Session 27 run 1 (build.sh; not run: no device was lent in session 27,
# kept for a later session): what uniform PutStart (head) buys against
# main before it (prev), interleaved: the one-caller loopback master calls
# at 4096 keys (x3 each binary; prev has no PutStartUniform rows), the
# go-remote Store path 4-256 KiB (x3 each), head's go-remote 4-64 KiB with
# pipeline chunks of 1024 and 2048 keys (x2 each; default 512), go-embedded
# 4-64 KiB head/prev (x2 each), and the host's speed (BenchmarkPutRounds,
# head).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/*.xz .device/*/*.xz
chmod +x .device/kvfabric .device/master.test .device/*/kvfabric .device/*/master.test
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
bin() { case $1 in head) echo "$D";; *) echo "$D/$1";; esac; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
lscpu > "$L/lscpu.txt" 2>&1
PR='BenchmarkPutRounds/live=0/size=4096/prep=uniform'
LB='BenchmarkLoopbackOneCaller/rpc=(PutStart|PutStartUniform|GetReplicas)/client=(fast|grpc)/keys=4096'
(cd internal/master && st putrounds-before "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
for rep in 1 2 3; do
  for v in prev head; do
    (cd internal/master && st loopback-$v-$rep "$(bin $v)/master.test" -test.run XXX -test.bench "$LB" -test.benchtime 200x)
  done
  pack
done
for rep in 1 2 3; do
  for v in prev head; do
    st remote-$v-$rep "$(bin $v)/kvfabric" bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/remote-$v-$rep.json"
  done
  pack
done
for rep in 1 2; do
  for ch in 1024 2048; do
    st remote-chunk$ch-$rep "$D/kvfabric" bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB --pipeline-chunk $ch --json "$L/remote-chunk$ch-$rep.json"
  done
  pack
done
for rep in 1 2; do
  for v in prev head; do
    st embedded-$v-$rep "$(bin $v)/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 4KiB,16KiB,64KiB --json "$L/embedded-$v-$rep.json"
  done
  pack
done
(cd internal/master && st putrounds-after "$D/master.test" -test.run XXX -test.bench "$PR" -test.benchtime 300x -test.count 3)
pack
cat "$L/summary.txt"
grep -hE "^Benchmark" "$L"/putrounds-*.log | sed 's/ *\t */ /g'
for f in "$L"/loopback-*.log; do grep -E "^Benchmark" "$f" | awk -v f="$(basename $f .log)" '{print f, $1, $(NF-1), $NF}'; done
for f in "$L"/remote-*.log "$L"/embedded-*.log; do grep -E "^  1gpu" "$f" | awk -v f="$(basename $f .log)" '{print f, $2, $3, $4, $10}'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"; grep "Model name" "$L/lscpu.txt"
