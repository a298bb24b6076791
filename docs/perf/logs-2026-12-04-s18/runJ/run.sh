#!/usr/bin/env bash
# Session 18 run J: the Mooncake facade's *_multi_buffers (vLLM's store
# connector) before (base = 8c885eb: a Buf per buffer) and after (new =
# 72972b0: flat region arrays; multi-buffer puts of >= 2048 buffers stream),
# new also with the stream off. scripts/multi-buffers.py, three layouts,
# x2 interleaved; kvfabric bench --store go-embedded 1 MiB / 2 MiB for the
# pool-segment ceiling and the Go API's rate beside it.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)' $(find "$D" -name "*.xz")
chmod +x "$D"/kvfabric
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
st() { local n=$1; shift; local t0=$SECONDS; timeout 150 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cat > "$D/py.sh" <<'EOS'
#!/usr/bin/env bash
D=$(cd "$(dirname "$0")" && pwd); v=$1; shift
exec env PYTHONPATH="$D/$v" KVFABRIC_LIB="$D/$v/libkvfabric.so" python3 "$D/multi-buffers.py" "$@"
EOS
chmod +x "$D/py.sh"
A="--layers 32 --region 32768 --keys 128"
B="--layers 28 --region 16384 --keys 256"
C="--layers 32 --region 32768 --keys 16"
for rep in 1 2; do
  for lay in A B C; do
    args=${!lay}
    st $lay-base-$rep "$D/py.sh" base $args --rounds 8
    st $lay-new-$rep "$D/py.sh" new $args --rounds 8
    st $lay-nostream-$rep "$D/py.sh" new $args --rounds 8 --modes multi --no-stream
  done
done
st bench-emb "$D"/kvfabric bench --store --driver cuda --sizes 1MiB,2MiB --paths go-embedded --json "$L/bench-emb.json"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
