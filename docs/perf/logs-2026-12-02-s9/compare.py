import json,sys,glob,collections
# usage: cmp.py DIR PREFIX  -> old/new min-max per (path,dir,size)
d,pre=sys.argv[1],sys.argv[2]
agg=collections.defaultdict(lambda: collections.defaultdict(list))
ph=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(f"{d}/{pre}-*.json")):
    v=f.split('/')[-1].split('-')[1]
    j=json.load(open(f))
    for r in j['results']:
        k=(r['path'],r['dir'],r['size'])
        agg[k][v].append(r['ratio'])
        ph[k][v].append(r.get('phase_us_per_key',{}))
def rng(x): return f"{min(x):.3f}-{max(x):.3f}" if x else "-"
for k in sorted(agg,key=lambda k:(k[0],k[1],k[2])):
    o,n=agg[k]['old'],agg[k]['new']
    def pm(v,key):
        xs=[p.get(key,0) for p in ph[k][v]]; return f"{sum(xs)/len(xs):.3f}" if xs else "-"
    print(f"{k[0]:12s} {k[1]} {k[2]//1024:6d}K old {rng(o)} new {rng(n)}  meta {pm('old','meta')}/{pm('new','meta')} copy {pm('old','copy')}/{pm('new','copy')} end {pm('old','end')}/{pm('new','end')} master {pm('old','master')}/{pm('new','master')}")
