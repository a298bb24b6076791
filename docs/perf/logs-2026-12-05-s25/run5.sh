#!/usr/bin/env bash
# Session 25 run 5: BenchmarkPutShards on the H100 host's CPU (what a
# master sharded by key would give the embedded put path), x3. Build
# first (repository root): go test -c -ldflags='-s -w' -o .device/master.test ./internal/master
# then run with carry [".device"].
set -u
L=$OUT/logs; mkdir -p "$L"
nproc > "$L/nproc.txt"; lscpu > "$L/lscpu.txt" 2>&1
(cd internal/master && ../../.device/master.test -test.run xxx -test.bench 'BenchmarkPutShards' -test.benchtime 100x -test.count 3) > "$L/shards.log" 2>&1
echo "rc=$?" >> "$L/shards.log"
cat "$L/shards.log"
