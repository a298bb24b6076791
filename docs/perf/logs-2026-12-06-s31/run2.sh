#!/usr/bin/env bash
# Session 31 run 2 (build1.sh rerun at the commit that sizes answers by
# column exactly; prev unchanged): answers by column against
# answers by result.
#  - BenchmarkLoopbackOneCaller (master in the process, one caller, 64,
#    512 and 4096 keys, gRPC and fast path): GetReplicas / GetReplicasRows,
#    PutStartUniform / PutStartUniformRows, x3 (each run has both);
#  - BenchmarkCodec x3 (one call's codec work, no sockets);
#  - bench --store go-remote 4 KiB - 256 KiB, head against prev, x4
#    interleaved (each starts its own `kvfabric master`).
set -u
L=$OUT/logs; mkdir -p "$L"
python3 -c 'import lzma, shutil, sys, os
for f in sys.argv[1:]:
    with lzma.open(f) as i, open(f[:-3], "wb") as o: shutil.copyfileobj(i, o)
    os.remove(f)' .device/*.xz
chmod +x .device/kvfabric* .device/*.test
D=$PWD/.device
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
st() { local n=$1; shift; local t0=$SECONDS; timeout 240 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
cp .device/version.txt "$L/"
{ nproc; lscpu; } > "$L/host.txt" 2>&1
nvidia-smi -q > "$L/nvidia-smi.log" 2>&1
for rep in 1 2 3; do
  (cd internal/master && st loopback-$rep "$D/master.test" -test.run XXX -test.bench 'BenchmarkLoopbackOneCaller/rpc=(GetReplicas|GetReplicasRows|PutStartUniform|PutStartUniformRows)/client=(grpc|fast)/keys=(64|512|4096)$' -test.benchtime 300x)
done
(cd internal/master && st codec "$D/master.test" -test.run XXX -test.bench 'BenchmarkCodec/.*/codec=hand' -test.benchtime 300x -test.count 3)
pack
for rep in 1 2 3 4; do
  for v in "" -prev; do
    st remote$v-$rep "$D/kvfabric$v" bench --store --driver cuda --paths go-remote --sizes 4KiB,16KiB,64KiB,256KiB --json "$L/remote$v-$rep.json"
  done
  pack
done
cat "$L/summary.txt"
grep -h "^Bench" "$L"/loopback-*.log | sed -E 's/ +/ /g' | awk '{for(i=1;i<=NF;i++) if($(i+1)=="ns/key") print $1, $i}' | sort
grep -h "^Bench" "$L/codec.log" | sed -E 's/ +/ /g' | awk '{for(i=1;i<=NF;i++) if($(i+1)=="ns/key"||$(i+1)=="wireB/key") printf "%s %s ", $i, $(i+1); print $1}' | sort -k5
for f in "$L"/remote*-?.log; do echo "== $(basename $f .log)"; grep -E "go-remote +(put|get)" "$f" | awk '{print $3, $4, $10}'; done
grep -m1 "Product Name" "$L/nvidia-smi.log"
