#!/usr/bin/env bash
# Session 18 run M: the session's end against its start, single-buffer
# paths (nothing was meant to change there). base = 8c885eb, new = 1d2d84c:
# bench --store go-embedded (each variant's own binary) and python (each
# variant's library and package), 16 KiB / 64 KiB / 256 KiB, x2
# interleaved; exist-probe.py (the facade's batch_is_exist, 256 and 4096
# keys) with each variant's package and library.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $(find "$D" -name "*.xz")
chmod +x "$D"/*/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
S="--sizes 16KiB,64KiB,256KiB"
for rep in ${REPS:-1 2}; do
  for v in ${ORDER:-base new}; do
    st emb-$v-$rep "$D/$v/kvfabric" bench --store --driver cuda $S --paths go-embedded --json "$L/emb-$v-$rep.json"
    st py-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so "$D/$v/kvfabric" bench --store --driver cuda $S --paths python \
      --python-script "$D/$v/scripts/bench-store.py" --json "$L/py-$v-$rep.json"
  done
done
[ -n "${NOEXIST:-}" ] || for rep in 1 2; do
  for v in base new; do
    for n in 256 4096; do
      st exist-$v-$n-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so PYTHONPATH=$D/$v/python python3 "$D/new/scripts/exist-probe.py" $n
    done
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
