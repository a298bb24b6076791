#!/usr/bin/env bash
# Session 18 run P: the put pipeline's first chunk smaller. d8 = 41482da
# (first chunk = PipelineChunk/8 = 64 keys), d16 = the same with /16 (32
# keys), d32 = /32 (16 keys); nothing else differs. bench --store
# go-embedded 16 KiB - 1 MiB, x3, the order rotating.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $(find "$D" -name "*.xz")
chmod +x "$D"/kvf-*
export NCCL_NVLS_ENABLE=0
"$D"/kvf-d8 bench --store --driver cuda --sizes 64KiB --paths go-embedded > "$L/warmup.log" 2>&1
for rep in 1 2 3; do
  case $rep in 1) o="d8 d16 d32";; 2) o="d32 d8 d16";; 3) o="d16 d32 d8";; esac
  for v in $o; do
    timeout 150 "$D"/kvf-$v bench --store --driver cuda --sizes 16KiB,64KiB,256KiB,1MiB --paths go-embedded --json "$L/$v-$rep.json" > "$L/$v-$rep.log" 2>&1
    echo "$v-$rep rc=$?" >> "$L/summary.txt"
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
