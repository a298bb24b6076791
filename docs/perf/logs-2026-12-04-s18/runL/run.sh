#!/usr/bin/env bash
# Session 18 run L: where a 4 KiB get's CPU goes (6301258, not stripped, so
# the profile symbolizes): bench --store go-embedded 4 KiB with a CPU
# profile, x2; and the same at 4 KiB with 8 and 2 batch parts (gets split
# over that many goroutines; the default is 4).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $(find "$D" -name "*.xz")
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
for rep in 1 2; do
  st prof-$rep "$D"/kvfabric bench --store --driver cuda --sizes 4KiB --paths go-embedded --iters 10 --cpuprofile "$L/cpu-$rep.pprof" --json "$L/prof-$rep.json"
  for p in 8 2; do
    st parts$p-$rep "$D"/kvfabric bench --store --driver cuda --sizes 4KiB,16KiB --paths go-embedded --batch-parts $p --json "$L/parts$p-$rep.json"
  done
  st parts4-$rep "$D"/kvfabric bench --store --driver cuda --sizes 4KiB,16KiB --paths go-embedded --json "$L/parts4-$rep.json"
done
cp "$D"/kvfabric.xz "$L/" 2>/dev/null
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
