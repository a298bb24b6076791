#!/usr/bin/env bash
# Session 33 run 7 (build6.sh's .device, 7b2b049): does the python path's
# process lose CPUs to torch's own threads? The python path at 16 KiB -
# 256 KiB with OMP_NUM_THREADS=1 ("omp1") against the default ("def"),
# go-embedded beside them, x3 interleaved.
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
{ nproc; lscpu; python3 --version; python3 -c 'import torch; print(torch.__version__, torch.get_num_threads(), torch.__config__.parallel_info())'; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric
for rep in 1 2 3; do
  st go-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded --sizes 16KiB,64KiB,256KiB --json "$L/go-$rep.json"
  st py-def-$rep "$D/kvfabric" bench --store --driver cuda --paths python --sizes 16KiB,64KiB,256KiB --json "$L/py-def-$rep.json"
  st py-omp1-$rep env OMP_NUM_THREADS=1 "$D/kvfabric" bench --store --driver cuda --paths python --sizes 16KiB,64KiB,256KiB --json "$L/py-omp1-$rep.json"
  pack
done
cat "$L/summary.txt"
for f in "$L"/go-*.log "$L"/py-*.log; do echo "== $(basename $f .log) $(grep -E '^ +1gpu' "$f" | awk '{print $3, $4, $8, $10}' | paste -sd' ')"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
