#!/usr/bin/env bash
# Session 18 run O: gets split over 3, 4 (the default), 5 and 6 parts
# (bench --store go-embedded --batch-parts; 1d2d84c), 4/16/64 KiB, x2, the
# order rotating. Only the get rows are read (the flag splits puts too).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $(find "$D" -name "*.xz")
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0
"$D"/kvfabric bench --store --driver cuda --sizes 4KiB --paths go-embedded > "$L/warmup.log" 2>&1
for rep in 1 2; do
  ps="3 4 5 6"; [ $rep = 2 ] && ps="6 5 4 3"
  for p in $ps; do
    timeout 120 "$D"/kvfabric bench --store --driver cuda --sizes 4KiB,16KiB,64KiB --paths go-embedded --batch-parts $p --json "$L/parts$p-$rep.json" > "$L/parts$p-$rep.log" 2>&1
    echo "parts$p-$rep rc=$?" >> "$L/summary.txt"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
