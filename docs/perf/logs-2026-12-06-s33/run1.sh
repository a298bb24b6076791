#!/usr/bin/env bash
# Session 33 run 1 (build1.sh's .device): the final checks of issue 13 on
# one GPU: the real-driver tests (KVFABRIC_GPU_TESTS=1), `kvfabric demo`,
# the separate-process end-to-end checks (scripts/device-e2e.sh), and the
# goals table — go-embedded, go-remote, python and python-multi at
# 4 KiB - 16 MiB, x2, a plot of the first.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric .device/*.test
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export KVFABRIC_LIB=$D/libkvfabric.so KVFABRIC_BIN=$D/kvfabric
for t in internal_cuda internal_transfer internal_mapping; do
  rel=${t//_//}
  st gpu-tests-$t bash -c "cd $rel && KVFABRIC_GPU_TESTS=1 $D/$t.test -test.count=1 -test.v"
done
pack
st demo "$D/kvfabric" demo
for rep in 1 2; do
  plot=""; [ $rep = 1 ] && plot="--plot $L/all-1.svg"
  st all-$rep "$D/kvfabric" bench --store --driver cuda --paths go-embedded,go-remote,python,python-multi --json "$L/all-$rep.json" $plot
  pack
done
OUT=$L/e2e st e2e scripts/device-e2e.sh
pack
cat "$L/summary.txt"
for t in internal_cuda internal_transfer internal_mapping; do echo "== $t: $(grep -c '^--- PASS' $L/gpu-tests-$t.log) pass, $(grep -c '^--- SKIP' $L/gpu-tests-$t.log) skip, $(grep -c '^--- FAIL' $L/gpu-tests-$t.log) fail"; done
grep -iE "simulator|real cuda|verified" "$L/demo.log" | head -5
for f in "$L"/all-?.log; do echo "== $(basename $f .log)"; grep -E "^ +1gpu" "$f" | awk '{print $2, $3, $4, $10}' | paste -sd' ' | fold -w 400; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
