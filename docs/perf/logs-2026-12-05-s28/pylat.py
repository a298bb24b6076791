# Tabulates scripts/device-latency.sh logs (pylat-{spin,nospin,spin200,prev,gogc100,gogcoff}-N.log,
# and pylat-N.log as "head") of the runs named: min-max of p50 and p99 per
# variant, size and row.
# Usage (from a session's logs folder): python3 pylat.py run2 run4 (s28),
# python3 ../logs-2026-12-05-s28/pylat.py run1 (s29, s30)
import re,sys,glob,collections
for run in sys.argv[1:]:
    rows=collections.defaultdict(list)
    for f in sorted(glob.glob(run+'/logs/pylat-*.log')):
        var=re.search(r'pylat-(?:(spin200|spin|nospin|prev|gogc100|gogcoff)-)?\d', f).group(1) or 'head'
        size=None
        sec=None
        for line in open(f):
            m=re.match(r'(remote master, )?size (\d+)',line.strip())
            if m:
                size=int(m.group(2)); sec='remote' if m.group(1) else 'emb'; continue
            m=re.match(r'\s+(\S+)\s+p50\s+([\d.]+) µs\s+p99\s+([\d.]+)\s+min\s+([\d.]+)',line)
            if m and size:
                rows[(var,size,m.group(1))].append((float(m.group(2)),float(m.group(3))))
    print('==',run)
    for k in sorted(rows):
        v=rows[k]
        p50=[a for a,b in v]; p99=[b for a,b in v]
        print(f'{k[0]:7} {k[1]//1024:3}K {k[2]:22} n={len(v)} p50 {min(p50):.1f}-{max(p50):.1f}  p99 {min(p99):.1f}-{max(p99):.1f}')
