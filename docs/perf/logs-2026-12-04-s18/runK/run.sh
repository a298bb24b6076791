#!/usr/bin/env bash
# Session 18 run K: checkBuffers' byRegion. base = 6d9e8e0 (flat
# multi-buffer facade; only the previous region's registered buffer
# remembered), new = 6301258 (region j's buffer of the keys before
# remembered). scripts/multi-buffers.py (as of 6301258: one registered
# buffer per layer tensor, as vLLM registers them), layouts A/B/C of run J,
# x2 interleaved; new with --one-buffer on A as the control; kvfabric bench
# (transfer engine) at 16 KiB, 32 KiB and 2 MiB blocks: the copy paths'
# own rate at the buffer sizes of the layouts.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $(find "$D" -name "*.xz")
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
cat > "$D/py.sh" <<'EOS'
#!/usr/bin/env bash
D=$(cd "$(dirname "$0")" && pwd); v=$1; shift
exec env PYTHONPATH="$D/new" KVFABRIC_LIB="$D/$v/libkvfabric.so" python3 "$D/multi-buffers.py" "$@"
EOS
chmod +x "$D/py.sh"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
A="--layers 32 --region 32768 --keys 128"
B="--layers 28 --region 16384 --keys 256"
C="--layers 32 --region 32768 --keys 16"
for rep in 1 2; do
  for lay in A B C; do
    args=${!lay}
    st $lay-base-$rep "$D/py.sh" base $args --rounds 8
    st $lay-new-$rep "$D/py.sh" new $args --rounds 8
  done
  st A-onebuf-$rep "$D/py.sh" new $A --rounds 8 --one-buffer
done
st te "$D"/kvfabric bench --driver cuda --sizes 16KiB,32KiB,2MiB
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
