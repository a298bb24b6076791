#!/usr/bin/env bash
# Session 33 run 6 (build6.sh's .device): puts of 64 KiB blocks on the copy
# engines (copy_engine_min_bytes 64 KiB, "ce64") against the SM kernel (the
# default 128 KiB, "def"), now that chunks of copy-engine regions are
# pipelined: go-embedded --scatter puts at 64 and 128 KiB (no merged
# copies), multi-buffers.py C64 (64 keys x 64 x 64 KiB) embedded and
# python-multi 4 MiB (64 x 64 KiB), x3 interleaved.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*/*.xz
chmod +x .device/*/kvfabric
D=$PWD/.device/head
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export PYTHONPATH=$PWD/python KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric
C64="--layers 32 --region 65536 --keys 64"
for rep in 1 2 3; do
  for v in ce64 def; do
    if [ $v = ce64 ]; then cfg='{"copy_engine_min_bytes": 65536}'; flag="--copy-engine-min 64KiB"; else cfg='{}'; flag=""; fi
    st scat-$v-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded --scatter --sizes 64KiB,128KiB $flag --json "$L/scat-$v-$rep.json"
    st mbC64-$v-$rep env KVFABRIC_CONFIG="$cfg" python3 scripts/multi-buffers.py $C64 --rounds 6 --modes multi
    st multi-$v-$rep env KVFABRIC_CONFIG="$cfg" "$D/kvfabric" bench --store --driver cuda --paths python-multi --sizes 4MiB --json "$L/multi-$v-$rep.json"
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/scat-*.log "$L"/multi-*.log; do echo "== $(basename $f .log) $(grep -E '^ +1gpu' "$f" | awk '{print $3, $4, $10}' | paste -sd' ')"; done
for f in "$L"/mb*.log; do echo "== $(basename $f .log) $(grep -E '^multi (put|get):' "$f" | grep -oE '(put|get):|[0-9.]+ of the ceiling' | paste -sd' ')"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
