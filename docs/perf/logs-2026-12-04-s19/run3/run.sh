#!/usr/bin/env bash
# Session 19 run 3 (build.sh first): small launches of the copy kernel
# (the probe's "launch" set), then bench --store go-embedded 16/32/64 KiB
# for each build in .device/v/ (versions.txt; base = 43b228b; s16 =
# launchShape's minimum slice 16 KiB; s4 = 4 KiB; s16f = 16 KiB and the put
# pipeline's first chunk c/16 = 32 keys; coal = s16 with coalesce.patch),
# one --gpu-times timeline run each, then 3 interleaved plain runs; s16 and
# coal again with --scatter; a go-remote timeline of base at 64 and 256
# KiB; the master's loopback PutStart with a CPU profile.
set -u
L=$OUT/logs; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
V=.device/v
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $V/*/kvfabric.xz
chmod +x $V/*/kvfabric
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
/usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -I kernels -o /tmp/probe scripts/copy-kernel-probe.cu -lcuda > "$L/build.log" 2>&1
st probe-launch /tmp/probe 3 20 launch
S="--sizes 16KiB,32KiB,64KiB --paths go-embedded"
for v in base s16 s4 s16f coal; do
  st tl-$v $V/$v/kvfabric bench --store --driver cuda $S --gpu-times --json "$L/tl-$v.json"
done
for rep in 1 2 3; do
  for v in base s16 s4 s16f coal; do
    st emb-$v-$rep $V/$v/kvfabric bench --store --driver cuda $S --json "$L/emb-$v-$rep.json"
  done
done
# A paged KV cache's layout: no two keys' buffers adjoin, nothing merges.
for rep in 1 2; do
  for v in s16 coal; do
    st scatter-$v-$rep $V/$v/kvfabric bench --store --driver cuda $S --scatter --json "$L/scatter-$v-$rep.json"
  done
done
# Where a remote-master put's time goes (base only, one timeline run).
st tl-remote-base $V/base/kvfabric bench --store --driver cuda --sizes 64KiB,256KiB --paths go-remote --gpu-times --json "$L/tl-remote-base.json"
# The master's PutStart over gRPC and embedded on this host's CPU, with a
# CPU profile (client and server in one process; master.test of 43b228b).
python3 -c 'import lzma, shutil
with lzma.open(".device/master.test.xz") as i, open("/tmp/master.test", "wb") as o: shutil.copyfileobj(i, o)'
chmod +x /tmp/master.test
(cd internal/master && st loopback-prof /tmp/master.test -test.run xxx -test.bench 'BenchmarkLoopback/rpc=PutStart/client=(grpc|embedded)/' -test.benchtime 100x -test.cpuprofile "$L/loopback.prof")
