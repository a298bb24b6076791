#!/usr/bin/env bash
# Session 12 run G: where a 4-16 KiB batch get's wall time goes.
# kvfabric-gx = 0f84945 + exp-getstats.patch (never committed): per batch
# of >= 1024 keys, the time before the split, the parts' spawn delay and
# durations (shortest, longest), the join and what follows it; per part,
# its first GetReplicas answer, its first submission and its final wait
# (KVF_EXP_GETSTATS=1, printed at the Store's Close: warm-up included).
# go-embedded, one size per run, default parts (4) and 2 and 1, x3.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*.xz
chmod +x "$D"/kvfabric-gx
export NCCL_NVLS_ENABLE=0
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for rep in 1 2 3; do
  for sz in 4KiB 16KiB; do
    for bp in 0 2 1; do
      st g-$sz-bp$bp-$rep env KVF_EXP_GETSTATS=1 "$D/kvfabric-gx" bench --store --driver cuda --paths go-embedded --sizes $sz --batch-parts $bp --json "$L/g-$sz-bp$bp-$rep.json"
    done
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
