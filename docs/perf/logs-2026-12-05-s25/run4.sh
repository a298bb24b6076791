#!/usr/bin/env bash
# Session 25 run 4 (`run2-build.sh` first, at the commit that adds
# --master-trace; carry [".device"]): where a remote put's first PutStart
# waits. go-remote 256 KiB with --gpu-times (the pipeline timeline), an
# execution trace and a CPU profile of the bench (client) and of its
# master (the traces carry the CPU samples), x2.
set -u
L=$OUT/logs; mkdir -p "$L"
[ -x .device/kvfabric ] || { python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' .device/*.xz; chmod +x .device/kvfabric; }
K=$PWD/.device/kvfabric
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 170 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; pack; }
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
cp .device/version.txt "$L/"
for rep in 1 2; do
  st tr-256K-$rep $K --trace "$L/client-$rep.trace" --cpuprofile "$L/client-$rep.cpu" bench --store --driver cuda --sizes 256KiB --paths go-remote --gpu-times \
    --master-trace "$L/master-$rep.trace" --json "$L/tr-256K-$rep.json"
done
pack
cat "$L/summary.txt"; ls -la "$L"; grep -A6 "put timeline" "$L"/tr-256K-*.log
