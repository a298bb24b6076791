#!/usr/bin/env bash
# Session 17 run H: the python facade's batch_put_from as a put stream.
# base = 836a5b0 (lib + python package), new = b8613cf (lib + python
# package); one bench binary (new: its go paths are base's code plus the
# unused PutStream). python path 16 KiB-1 MiB x3 interleaved, go-embedded
# x2 as the reference the facade is held to (within 10 %).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/new/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 16KiB,64KiB,256KiB,1MiB"
st emb-1 "$D/new/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-1.json"
for rep in 1 2 3; do
  for v in base new; do
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/new/kvfabric" bench --store --driver cuda $S --paths python \
      --python-script "$D/$v/scripts/bench-store.py" --json "$L/py-$v-$rep.json"
  done
done
st emb-2 "$D/new/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-2.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
