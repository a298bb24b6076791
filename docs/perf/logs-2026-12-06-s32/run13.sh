#!/usr/bin/env bash
# Session 32 run 13 (build12.sh's .device, rebuilt at the commit in
# version.txt): batch gets split by regions (head) against by keys (prev)
# through a remote master (`kvfabric master` of head on loopback, one per
# run): scripts/multi-buffers.py layouts A and B, x2 interleaved.
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*/*.xz
chmod +x .device/*/kvfabric
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 200 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; python3 --version; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
export PYTHONPATH=$PWD/python
A="--layers 32 --region 32768 --keys 128"
B="--layers 28 --region 16384 --keys 256"
for rep in 1 2; do
  for v in head prev; do
    for lay in A B; do
      rm -f /tmp/maddr
      "$D/head/kvfabric" master --listen 127.0.0.1:0 --metrics-listen "" --addr-file /tmp/maddr > "$L/master-$lay-$v-$rep.log" 2>&1 &
      mp=$!
      for i in $(seq 50); do [ -s /tmp/maddr ] && break; sleep 0.1; done
      st mb$lay-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so python3 scripts/multi-buffers.py ${!lay} --rounds 6 --modes multi --master "$(cat /tmp/maddr)"
      kill $mp; wait $mp 2>/dev/null
    done
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/mb*.log; do echo "== $(basename $f .log)"; grep -E "^multi (put|get):" "$f" | sed -E 's/us per call \(min\/median\/max\); //'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
