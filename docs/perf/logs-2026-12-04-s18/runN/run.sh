#!/usr/bin/env bash
# Session 18 run N: is the python path's get slower at the session's end?
# getprobe.py (facade batch_get_into, 4096 keys, 16 and 64 KiB, 16 rounds
# verified) with each python package (P: base = 8c885eb, new = 1d2d84c)
# and each library (L: the same), the four pairs x2, the order rotating.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $(find "$D" -name "*.xz")
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
for rep in 1 2; do
  for pair in "base base" "new new" "base new" "new base" ; do
    set -- $pair
    [ $rep = 2 ] && set -- $2 $1
    env PYTHONPATH=$D/$1/python KVFABRIC_LIB=$D/$2/libkvfabric.so timeout 120 python3 "$D/getprobe.py" "P=$1 L=$2 rep=$rep" 16 >> "$L/getprobe.log" 2>&1
  done
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
