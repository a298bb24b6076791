#!/usr/bin/env bash
# Session 21 run 1 = session 20's run 1 (parts A and B, unchanged) plus part C
# (build.sh first, from this directory; carry [".device"]). Part A (run.sh A):
#  1. gated GPU tests: TestGPUPointerRanges (what the driver reports as an
#     allocation's range: merged copies stay inside one), TestKernelSlicesOnDevice;
#  2. bench --store go-embedded and go-remote at 4 KiB-1 MiB, 3 interleaved
#     rounds of: head (copies merged), head --separate-copies, base (43b228b);
#  3. head and head --separate-copies with --scatter (a paged cache: nothing merges);
#  4. a --gpu-times timeline of head and head --separate-copies at 64 KiB;
#  5. batches of 128 keys (--max-keys 128) at 4 and 64 KiB, 3 interleaved
#     rounds of head --separate-copies (two-chunk batches inline) and s19.
# Part B (run.sh B): the copy kernel's small launches (probe "launch" set);
#  s4 and s16f against head --separate-copies at 16/32/64 KiB, 3 rounds;
#  the python path of head; the master's loopback PutStart with a CPU profile.
# Part C (run.sh C): a full store (--prefill: every put evicts), 3 interleaved
#  rounds of head (eviction by a clock) and s20 (16 random members sampled per
#  victim), go-embedded and go-remote, 4 KiB-16 MiB; and the master's
#  BenchmarkPutFull on the host CPU.
set -u
PART=${1:-A}
L=$OUT/logs; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/v/*/kvfabric.xz .device/*.test.xz .device/libkvfabric.so.xz
chmod +x .device/v/*/kvfabric .device/*.test
V=.device/v
st() { local n=$1; shift; local t0=$SECONDS; timeout 240 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
if [ "$PART" = A ]; then
  (cd internal/cuda && KVFABRIC_GPU_TESTS=1 st gpu-ranges ../../.device/cuda.test -test.run 'TestGPUPointerRanges|TestGPUPointerMemoryTypes' -test.v)
  (cd internal/transfer && KVFABRIC_GPU_TESTS=1 st gpu-slices ../../.device/transfer.test -test.run 'TestKernelSlicesOnDevice' -test.v)
  S="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB --paths go-embedded,go-remote"
  for rep in 1 2 3; do
    st merge-$rep $V/head/kvfabric bench --store --driver cuda $S --json "$L/merge-$rep.json"
    st sep-$rep $V/head/kvfabric bench --store --driver cuda $S --separate-copies --json "$L/sep-$rep.json"
    st base-$rep $V/base/kvfabric bench --store --driver cuda $S --json "$L/base-$rep.json"
  done
  st scatter-merge $V/head/kvfabric bench --store --driver cuda $S --scatter --json "$L/scatter-merge.json"
  st scatter-sep $V/head/kvfabric bench --store --driver cuda $S --scatter --separate-copies --json "$L/scatter-sep.json"
  st tl-merge $V/head/kvfabric bench --store --driver cuda --sizes 64KiB --paths go-embedded --gpu-times --json "$L/tl-merge.json"
  st tl-sep $V/head/kvfabric bench --store --driver cuda --sizes 64KiB --paths go-embedded --gpu-times --separate-copies --json "$L/tl-sep.json"
  for rep in 1 2 3; do
    st small-head-$rep $V/head/kvfabric bench --store --driver cuda --sizes 4KiB,64KiB --paths go-embedded,go-remote --max-keys 128 --separate-copies --json "$L/small-head-$rep.json"
    st small-s19-$rep $V/s19/kvfabric bench --store --driver cuda --sizes 4KiB,64KiB --paths go-embedded,go-remote --max-keys 128 --json "$L/small-s19-$rep.json"
  done
elif [ "$PART" = C ]; then
  S="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB --paths go-embedded,go-remote --prefill"
  for rep in 1 2 3; do
    st prefill-head-$rep $V/head/kvfabric bench --store --driver cuda $S --json "$L/prefill-head-$rep.json"
    st prefill-s20-$rep $V/s20/kvfabric bench --store --driver cuda $S --json "$L/prefill-s20-$rep.json"
  done
  (cd internal/master && st putfull ../../.device/master.test -test.run xxx -test.bench 'BenchmarkPutFull' -test.benchtime 100x -test.count 3)
else
  /usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -I kernels -o /tmp/probe scripts/copy-kernel-probe.cu -lcuda > "$L/build.log" 2>&1
  st probe-launch /tmp/probe 3 20 launch
  S="--sizes 16KiB,32KiB,64KiB --paths go-embedded --separate-copies"
  for rep in 1 2 3; do
    for v in head s4 s16f; do
      st slices-$v-$rep $V/$v/kvfabric bench --store --driver cuda $S --json "$L/slices-$v-$rep.json"
    done
  done
  KVFABRIC_LIB=$PWD/.device/libkvfabric.so st python $V/head/kvfabric bench --store --driver cuda --sizes 16KiB,64KiB,256KiB --paths go-embedded,python --json "$L/python.json"
  (cd internal/master && st loopback-prof ../../.device/master.test -test.run xxx -test.bench 'BenchmarkLoopback/rpc=PutStart/client=(grpc|embedded)/' -test.benchtime 100x -test.cpuprofile "$L/loopback.prof")
fi
python3 docs/perf/logs-2026-12-05-s21/run1/summary.py "$L" > "$L/ranges.txt" 2>&1
