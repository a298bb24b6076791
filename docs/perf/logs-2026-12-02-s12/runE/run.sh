#!/usr/bin/env bash
# Session 12 run E: is the Python facade's gap at 64 KiB (gets 0.69-0.76
# against the Go API's 0.85-0.89, run D) the stream? The facade passes
# stream 0 (the legacy default stream); the Go bench a non-blocking stream
# of its own. s0 = 0f84945 + stream-exp.patch (never committed):
# KVF_EXP_STREAM0=1 puts the Go paths' Store calls on stream 0;
# KVF_EXP_PYSTREAM=1 gives the facade's calls a torch stream of their own.
# 16-256 KiB, three interleaved reps.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$D/s0/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
B="$D/s0/kvfabric bench --store --driver cuda --sizes 16KiB,64KiB,256KiB"
P="--paths python --python-script $D/s0/scripts/bench-store.py"
for rep in 1 2 3; do
  st emb-base-$rep $B --paths go-embedded --json "$L/emb-base-$rep.json"
  st emb-s0-$rep env KVF_EXP_STREAM0=1 $B --paths go-embedded --json "$L/emb-s0-$rep.json"
  st py-base-$rep env KVFABRIC_LIB=$D/s0/libkvfabric.so $B $P --json "$L/py-base-$rep.json"
  st py-own-$rep env KVF_EXP_PYSTREAM=1 KVFABRIC_LIB=$D/s0/libkvfabric.so $B $P --json "$L/py-own-$rep.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
