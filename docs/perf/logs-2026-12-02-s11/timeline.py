#!/usr/bin/env python3
"""Prints, for every put timeline in the JSON files given (kvfabric bench
--store --gpu-times), each chunk's ask delay (its PutStart's start minus the
previous chunk's answer being taken: the pipeline starts the next call just
before that), the GPU's idle time and the pipeline's total, and the GPU time
of its 512-key chunks; then the min-max of the ask delays over all files.

    python3 timeline.py runA/*.json
"""
import json, sys

delays = []
for f in sys.argv[1:]:
    for r in json.load(open(f))['results']:
        tl = r.get('put_timeline_us')
        if not tl:
            continue
        d = [tl[i]['asked'] - tl[i - 1]['received'] for i in range(1, len(tl))]
        delays += d
        idle = sum(c['gpu_start'] - (tl[i - 1]['gpu_finish'] if i else 0) for i, c in enumerate(tl))
        full = [round(c['gpu_finish'] - c['gpu_start'], 1) for c in tl if c['keys'] == 512]
        print(f"{f} {r['size'] // 1024} KiB: ask delay {[round(x, 1) for x in d]} "
              f"gpu idle {idle:.0f} us of {tl[-1]['waited']:.0f}; 512-key chunks on the GPU {full}")
if delays:
    mid = sorted(delays)[len(delays) // 4: 3 * len(delays) // 4]
    print(f"ask delay over all: {min(delays):.1f}-{max(delays):.1f} us, middle half {mid[0]:.1f}-{mid[-1]:.1f}")
