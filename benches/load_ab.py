"""Summary of benches/load_ab.sh's reports in DIR: every run, then each measure's mean per
binary and the paired difference (new - old) over the rounds with a 95% t interval; the server
stages are also given over the same run's query encoding (a within-run control).

    python3 benches/load_ab.py DIR
"""
import os, sys
import json,glob,re,statistics as st,math
rows={}
for f in sorted(glob.glob(os.path.join(sys.argv[1], '*-*.json'))):
    m=re.match(r'(new|old)-(\d+)\.json', os.path.basename(f))
    if not m: continue
    r=json.load(open(f)); rows[(m.group(1),int(m.group(2)))]=r
print("| round | binary | alone p50 / p99 ms | QPS | while ingesting p50 / p99 ms | ingest docs/s | server p50 alone: encode / candidates / rerank / total |")
print("|---|---|---|---:|---|---:|---|")
for (b,i),r in sorted(rows.items(), key=lambda x:(x[0][1],x[0][0])):
    a,g=r[0],r[1]; e=a['extra']
    print(f"| {i} | {b} | {a['p50_ms']:.1f} / {a['p99_ms']:.1f} | {a['qps']:.1f} | {g['p50_ms']:.1f} / {g['p99_ms']:.1f} | {g['extra'].get('ingest_docs_per_s',0):.0f} | {e['encode_p50_ms']:.2f} / {e['candidates_p50_ms']:.2f} / {e['rerank_p50_ms']:.2f} / {e['server_total_p50_ms']:.2f} |")
def ci(d):
    n=len(d); m=st.mean(d)
    if n<2: return m,float('nan')
    t={2:12.71,3:4.30,4:3.18,5:2.78,6:2.57,7:2.45,8:2.36,9:2.31,10:2.26,11:2.23,12:2.20}.get(n,2.0)
    return m, t*st.stdev(d)/math.sqrt(n)
rounds=sorted({i for (_,i) in rows if ('new',i) in rows and ('old',i) in rows})
for name,get in [('alone p50',lambda r:r[0]['p50_ms']),('alone p99',lambda r:r[0]['p99_ms']),('alone server total',lambda r:r[0]['extra']['server_total_p50_ms']),('ingesting p50',lambda r:r[1]['p50_ms']),('ingesting p99',lambda r:r[1]['p99_ms'])]:
    d=[get(rows[('new',i)])-get(rows[('old',i)]) for i in rounds]
    o=[get(rows[('old',i)]) for i in rounds]; nn=[get(rows[('new',i)]) for i in rounds]
    m,h=ci(d)
    print(f"{name}: new mean {st.mean(nn):.2f}, old mean {st.mean(o):.2f}, paired diff new-old {m:+.2f} ± {h:.2f} ms (95% t, n={len(d)})")
print()
for st_name in ['candidates_p50_ms','rerank_p50_ms','server_total_p50_ms']:
    for b in ['new','old']:
        r=[rows[(b,i)][0]['extra'][st_name]/rows[(b,i)][0]['extra']['encode_p50_ms'] for i in rounds]
        print(f"alone {st_name}/encode {b}: mean {st.mean(r):.3f} ({', '.join(f'{x:.3f}' for x in r)})")
    d=[rows[('new',i)][0]['extra'][st_name]/rows[('new',i)][0]['extra']['encode_p50_ms']-rows[('old',i)][0]['extra'][st_name]/rows[('old',i)][0]['extra']['encode_p50_ms'] for i in rounds]
    m,h=ci(d); print(f"   paired diff {m:+.3f} ± {h:.3f}")
