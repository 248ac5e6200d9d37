# Pair-by-pair ratios of side B to side A in a bench/ab.sh results file:
#   python3 bench/ratios.py RESULTS.jsonl A_SIDE B_SIDE
import json, sys
rows=[json.loads(l) for l in open(sys.argv[1])]
a,b=sys.argv[2],sys.argv[3]
by={}
for r in rows: by[(r["workload"],r["run"],r["side"])]=r["result"]
print(f"{b} / {a}, pair by pair:\n")
print("| workload | run | delivered/s | CPU per delivered | p50 | p99 |")
print("|---|---|---|---|---|---|")
seen=[]
for r in rows:
    k=(r["workload"],r["run"])
    if k in seen: continue
    seen.append(k)
    x,y=by.get((k[0],k[1],a)),by.get((k[0],k[1],b))
    if not x or not y: continue
    print(f"| {k[0]} | {k[1]} | {y['delivered_per_sec']/x['delivered_per_sec']:.2f}× | {y['cpu_us_per_delivered']/x['cpu_us_per_delivered']:.2f}× | {y['p50_us']/x['p50_us']:.2f}× | {y['p99_us']/x['p99_us']:.2f}× |")
