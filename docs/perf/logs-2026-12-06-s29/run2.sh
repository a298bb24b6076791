#!/usr/bin/env bash
# Session 29 run 2: the master's idle rule with the master in a process of
# its own (run1's BenchmarkFastSpinCPU shares one Go runtime between
# clients and master). .device holds client test binaries with
# devvm/spin-proc-experiment_test.go.txt dropped into internal/client:
# chead3 (9df9295, the final rule) and cprev (18d47f3, every armed wait
# spins). BenchmarkZZSpinProc (spin on and off) and BenchmarkZZSpinMixed,
# x3 interleaved.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/*.test
cp .device/version.txt "$L/"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cd internal/client
for rep in 1 2 3; do
  for v in cprev chead3; do
    st proc-$v-$rep ../../.device/$v.test -test.run XXX -test.bench 'BenchmarkZZSpin(Proc|Mixed)' -test.benchtime 4000x
  done
done
tar -C "$OUT" -cJf "$OUT/logs.tar.xz" logs
cat "$L/summary.txt"
for f in "$L"/proc-*.log; do echo "== $(basename $f .log)"; grep -E "^Bench" "$f" | sed 's/ *\t */ /g;s/BenchmarkZZSpin//'; done
