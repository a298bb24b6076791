#!/usr/bin/env bash
# Session 13 run G: where the goals stand with the session's last code.
# cur = d603f77, memo = 5157db7 (the last code change); go-embedded cur and
# memo, go-remote and python memo, 4 KiB-1 MiB, x3 interleaved.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' "$D"/*/*.xz
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"; lscpu >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 4KiB,16KiB,64KiB,256KiB,1MiB"
for rep in 1 2 3; do
  for v in cur memo; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
  done
  st rem-memo-$rep "$D/memo/kvfabric" bench --store --driver cuda $S --paths go-remote --json "$L/rem-memo-$rep.json"
  st py-memo-$rep env KVFABRIC_LIB=$D/memo/libkvfabric.so "$D/memo/kvfabric" bench --store --driver cuda $S --paths python --json "$L/py-memo-$rep.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
