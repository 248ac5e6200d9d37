# The pairs of `make bench-compare` results that another process did not disturb: prints
# every fanout and NATS-cluster row with its "others' CPU" (machine busy minus every
# process the script ran; in older files, minus nodes and bench), the fanout / NATS-cluster ratios over the clean pairs, and the
# per-added-peer slope of each run.
#   python3 bench/clean.py RESULTS.jsonl...
import json, sys
LIMIT = 3.5
files = sys.argv[1:]
rows = []
for f in files:
    for l in open(f):
        r = json.loads(l)
        # Timed rows that succeeded (not the memory workload's). Files written since the
        # KV anchors have others_cpu_s (busy minus every process the script ran);
        # older ones: busy minus nodes minus bench.
        if "workload" in r and r.get("ok") and "delivered_per_s" in r:
            r["file"] = f.split("/")[-1].replace(".jsonl", "")
            r["other"] = r["others_cpu_s"] if "others_cpu_s" in r else r["machine_busy_s"] - r["node_cpu_s"] - r["bench_cpu_s"]
            rows.append(r)
by = {(r["file"], r["run"], r["workload"], r["system"]): r for r in rows}
def fmt_us(u):
    return f"{u/1000:.2f} ms" if u >= 1000 else f"{u} µs"
print("| file | run | workload | system | delivered/s | p50 | p99 | CPU µs/delivered | lost | peak RSS MiB/node | others' CPU s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["system"] not in ("fanout", "nats-cluster"):
        continue
    print(f"| {r['file'][8:]} | {r['run']} | {r['workload']} | {r['system']} | {r['delivered_per_s']:,.0f} | {fmt_us(r['p50_us'])} | {fmt_us(r['p99_us'])} | {r['cpu_us_per_delivered']:.2f} | {r['lost']} | {'/'.join(str(round(x)) for x in r['peak_rss_mib_per_node'])} | {r['other']:.1f} |")
print()
ratios = {}
for (f, run, w, s), r in by.items():
    if s != "fanout":
        continue
    n = by.get((f, run, w, "nats-cluster"))
    if not n:
        continue
    clean = r["other"] <= LIMIT and n["other"] <= LIMIT
    d = ratios.setdefault(w, {"clean": [], "all": []})
    v = (r["delivered_per_s"] / n["delivered_per_s"], r["p50_us"] / n["p50_us"], r["p99_us"] / n["p99_us"],
         r["cpu_us_per_delivered"] / n["cpu_us_per_delivered"], r["peak_rss_mib_max"] / max(n["peak_rss_mib_per_node"]))
    d["all"].append(v)
    if clean:
        d["clean"].append(v)
def rng(vals, i):
    xs = [v[i] for v in vals]
    return f"{min(xs):.2f}–{max(xs):.2f}×" if xs else "–"
print(f"fanout / NATS cluster, same run, pairs where neither side saw more than {LIMIT} s of others' CPU:")
print()
print("| workload | delivered/s | p50 | p99 | CPU per delivered event | peak RSS per node | clean pairs (of all) |")
print("|---|---|---|---|---|---|---|")
for w, d in ratios.items():
    c = d["clean"]
    print(f"| {w} | {rng(c,0)} | {rng(c,1)} | {rng(c,2)} | {rng(c,3)} | {rng(c,4)} | {len(c)} of {len(d['all'])} |")
print()
print("per added peer (scale rows, CPU µs per submitted event = server CPU / submitted), runs where all six scale rows were clean:")
print()
print("| file | run | fanout N=3/5/9 | slope | NATS cluster N=3/5/9 | slope | ratio |")
print("|---|---|---|---|---|---|---|")
import collections
runs = collections.defaultdict(dict)
for r in rows:
    if r["workload"].startswith("scale-"):
        n = int(r["workload"].split("-")[1].split("@")[0])
        runs[(r["file"], r["run"])][(r["system"], n)] = r
for (f, run), d in runs.items():
    if len(d) < 6:
        continue
    clean = all(x["other"] <= LIMIT for x in d.values())
    def per(s):
        return [d[(s, n)]["node_cpu_s"] * 1e6 / d[(s, n)]["submitted"] for n in (3, 5, 9)]
    fa, na = per("fanout"), per("nats-cluster")
    sf, sn = (fa[2] - fa[0]) / 6, (na[2] - na[0]) / 6
    print(f"| {f[8:]} | {run}{'' if clean else ' (disturbed)'} | {fa[0]:.0f}/{fa[1]:.0f}/{fa[2]:.0f} | {sf:.1f} | {na[0]:.0f}/{na[1]:.0f}/{na[2]:.0f} | {sn:.1f} | {sf/sn:.2f}× |")
