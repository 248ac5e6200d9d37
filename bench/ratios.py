# Pair-by-pair ratios of side B to side A in a bench/ab.sh or bench/rev-ab.sh results
# file, and their range (min..max) per workload, over every pair and over the clean
# ones: a pair is disturbed when either side's "others' CPU" (the machine's busy CPU
# minus the measured processes') was above 3.5 s in a `sidecar bench` run (BENCHMARKS.md)
# or above PIPE_LIMIT cores on average in a BenchmarkPipeline run. A range is followed
# by the geometric mean of its ratios, in parentheses.
#   python3 bench/ratios.py RESULTS.jsonl A_SIDE B_SIDE
import json, math, sys
LIMIT = 3.5       # others' CPU s in a sidecar bench run
PIPE_LIMIT = 0.3  # others' CPU s per wall s in a BenchmarkPipeline run
rows = [json.loads(l) for l in open(sys.argv[1])]
a, b = sys.argv[2], sys.argv[3]
by = {(r["workload"], r["run"], r["side"]): r for r in rows}

def disturbed(r):
    x = r["result"]
    if "events_per_sec" in x:
        return r["other_cpu_s"] > PIPE_LIMIT * x["wall_s"]
    return r["other_cpu_s"] > LIMIT

def gmean(vs):
    return math.exp(sum(math.log(v) for v in vs) / len(vs))

def pairs(kind):
    seen = []
    for r in rows:
        k = (r["workload"], r["run"])
        if k in seen or ("events_per_sec" in r["result"]) != (kind == "pipeline"):
            continue
        seen.append(k)
        x, y = by.get((k[0], k[1], a)), by.get((k[0], k[1], b))
        if x and y:
            yield k[0], k[1], x, y

def table(kind, cols, raw=[]):
    # cols: (title, value) whose ratio B / A is shown; raw: (title, value) shown as A → B
    ranges = {}
    print("| workload | pair | " + " | ".join(c[0] for c in cols + raw) + " | others' CPU s, A / B |")
    print("|---|---|" + "---|" * len(cols + raw) + "---|")
    for w, run, x, y in pairs(kind):
        v = [c[1](y["result"]) / c[1](x["result"]) for c in cols]
        bad = disturbed(x) or disturbed(y)
        d = ranges.setdefault(w, {"all": [], "clean": []})
        d["all"].append(v)
        if not bad:
            d["clean"].append(v)
        print(f"| {w} | {run}{' (disturbed)' if bad else ''} | " + " | ".join(f"{r:.2f}×" for r in v) +
              "".join(f" | {c[1](x['result']):g} → {c[1](y['result']):g}" for c in raw) +
              f" | {x['other_cpu_s']:.1f} / {y['other_cpu_s']:.1f} |")
    for w, d in ranges.items():
        for which in ("all", "clean"):
            vs = d[which]
            if not vs:
                continue
            print(f"| {w} | {which} ({len(vs)}) | " +
                  " | ".join(f"{min(v[i] for v in vs):.2f}–{max(v[i] for v in vs):.2f}× ({gmean([v[i] for v in vs]):.2f})"
                             for i in range(len(cols))) +
                  " |" * (len(raw) + 2))
    print()

print(f"{b} / {a}, pair by pair, then the range (and geometric mean) over all pairs and over the clean ones:\n")
if any(True for _ in pairs("bench")):
    table("bench", [("delivered/s", lambda x: x["delivered_per_sec"]),
                    ("CPU per delivered", lambda x: x["cpu_us_per_delivered"]),
                    ("p50", lambda x: x["p50_us"]), ("p99", lambda x: x["p99_us"])])
if any(True for _ in pairs("pipeline")):
    table("pipeline", [("events/s", lambda x: x["events_per_sec"]),
                       ("process CPU per event", lambda x: x["cpu_s"] / x["n"])],
          [("B/op", lambda x: x["bytes_per_op"]), ("allocs/op", lambda x: x["allocs_per_op"])])
