#!/usr/bin/env bash
# Session 33 run 5 (build4.sh's .device, head 6de9a0a / prev 255b92f):
# chunks counting copy-engine regions (head) against chunks of keys (prev)
# on vLLM-like layouts whose regions go to the copy engines, through
# scripts/multi-buffers.py, embedded and through a remote master
# (`kvfabric master` of head on loopback, one per run), x2 interleaved:
#   C64:  64 regions of 64 KiB a key (32 layers, K and V), 64 keys (gets to
#         the copy engines, puts to the SM kernel)
#   C256: 64 regions of 256 KiB a key, 16 keys (both to the copy engines)
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
C64="--layers 32 --region 65536 --keys 64"
C256="--layers 32 --region 262144 --keys 16"
for rep in 1 2; do
  for v in head prev; do
    for lay in C64 C256; do
      st emb$lay-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so python3 scripts/multi-buffers.py ${!lay} --rounds 6 --modes multi
      rm -f /tmp/maddr
      "$D/head/kvfabric" master --listen 127.0.0.1:0 --metrics-listen "" --addr-file /tmp/maddr > "$L/master-$lay-$v-$rep.log" 2>&1 &
      mp=$!
      for i in $(seq 50); do [ -s /tmp/maddr ] && break; sleep 0.1; done
      st rem$lay-$v-$rep env KVFABRIC_LIB=$D/$v/libkvfabric.so python3 scripts/multi-buffers.py ${!lay} --rounds 6 --modes multi --master "$(cat /tmp/maddr)"
      kill $mp; wait $mp 2>/dev/null
    done
  done
  pack
done
cat "$L/summary.txt"
for f in "$L"/emb*.log "$L"/rem*.log; do echo "== $(basename $f .log) $(grep -E '^multi (put|get):' "$f" | sed -E 's/us per call \(min\/median\/max\); //; s/outside the library [0-9-]+ us; //' | paste -sd' ')"; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
