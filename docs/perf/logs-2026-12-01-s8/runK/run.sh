#!/usr/bin/env bash
# Device batch K (session 8, 58aeca5 + an experiment-only 50 ms sleep before
# each put phase when KVF_EXP_SLEEP is set): are the ramp's slow master calls
# the previous gets' background lease releases? Interleaved without/with.
set -u
D=$(cd "$(dirname "$0")" && pwd)
L=$OUT/logs; mkdir -p "$L"
gunzip -f "$D"/kvfabric.gz; chmod +x "$D"/kvfabric
st() { local n=$1; shift; local t0=$SECONDS; timeout 120 "$@" > "$L/$n.log" 2>&1; echo "$n rc=$? $((SECONDS-t0))s" >> "$L/summary.txt"; }
B="$D/kvfabric bench --store --driver cuda --gpu-times --paths go-embedded --sizes 16KiB,64KiB"
for r in 1 2; do
  st nosleep-$r $B --json "$L/nosleep-$r.json"
  KVF_EXP_SLEEP=1 st sleep-$r $B --json "$L/sleep-$r.json"
done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
