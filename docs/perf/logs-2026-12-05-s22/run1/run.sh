#!/usr/bin/env bash
# Session 22 run 1: session 21's run1 (build with its build.sh, carry
# [".device"]) parts A then C, its logs packed into $OUT/logs.tar.xz after
# each part (the device returns at most a few files). Part C gets what is
# left of the call's 600 s.
set -u
pack() { tar -C "$OUT" -cJf "$OUT/logs.tar.xz.tmp" logs && mv "$OUT/logs.tar.xz.tmp" "$OUT/logs.tar.xz"; }
R=docs/perf/logs-2026-12-05-s21/run1/run.sh
t0=$SECONDS
for p in ${PARTS:-A C}; do
  left=$((560 - (SECONDS - t0)))
  timeout "$left" bash $R "$p" > "$OUT/part-$p.out" 2>&1
  echo "part $p rc=$? $((SECONDS - t0))s" >> "$OUT/parts.txt"
  mv "$OUT/part-$p.out" "$OUT/logs/" 2>/dev/null
  pack
done
cat "$OUT/parts.txt"
