#!/usr/bin/env bash
# Device batch: per-reader leases (new, HEAD) against 34768ea (old).
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
for f in "$D"/*.gz; do gunzip -f "$f"; done
chmod +x "$D"/kvfabric-* "$D"/master-*.test
nvidia-smi -L > "$L/env.txt" 2>&1; nproc >> "$L/env.txt"
for r in 1 2; do for v in old new; do
  t0=$SECONDS
  timeout 120 "$D/kvfabric-$v" bench --store --driver cuda --paths go-embedded,go-remote --sizes 4KiB,16KiB,64KiB --json "$L/s-$v-$r.json" > "$L/s-$v-$r.log" 2>&1
  echo "s-$v-$r rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"
done; done
cd "$L"
for v in old new; do
  t0=$SECONDS
  timeout 60 "$D/master-$v.test" -test.run '^$' -test.bench 'BenchmarkGetRelease' -test.cpu 1,16 -test.benchtime 1s > "$L/m-$v.log" 2>&1
  echo "m-$v rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
