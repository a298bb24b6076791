#!/usr/bin/env bash
# Session 11 run C: the hand-off's parameters. kvfabric-exp = 9866ee9 with
# handoff.go's spin (KVF_EXP_SPIN_US, default 300), budget (GOMAXPROCS /
# KVF_EXP_BUDGET_DIV, default 2) and the pipeline's own spin
# (KVF_EXP_CALLER_SPIN=0: off) read from the environment; kvfabric-old =
# 5160f34 (a goroutine per call). go-embedded and python, 4-256 KiB, two
# interleaved reps of each variant.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz "$D"/*/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric*
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 4KiB,16KiB,64KiB,256KiB"
run() { # name binary lib env...
  local n=$1 b=$2 lib=$3; shift 3
  st emb-$n-$rep env "$@" "$D/kvfabric-$b" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$n-$rep.json"
  st py-$n-$rep env "$@" KVFABRIC_LIB=$D/$lib/libkvfabric.so "$D/kvfabric-$b" bench --store --driver cuda $S --paths python --json "$L/py-$n-$rep.json"
}
for rep in 1 2; do
  run old old old X=1
  run spin300 exp exp X=1
  run div4 exp exp KVF_EXP_BUDGET_DIV=4
  run nocaller exp exp KVF_EXP_CALLER_SPIN=0
  run spin100 exp exp KVF_EXP_SPIN_US=100
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
