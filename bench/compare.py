"""The rows and the summary of bench/compare.sh (make bench-compare).

  python3 bench/compare.py row RUN SEQ WORKLOAD SYSTEM LOAD BUSY0 BUSY1 OWN0 OWN1 T0 T1
      one JSON line on stdout from the bench's JSON in $RESULT ("null": failed)
  python3 bench/compare.py summary RESULTS.jsonl
      every measurement, fanout's ratios to each anchor within a run (the range over
      runs), the memory at the same number of live keys, the scale-out table, and the
      other processes' CPU per run

Systems: fanout (saturated/b1: one Go client Publisher call per event; elsewhere
`sidecar bench`'s pipelined SubmitStream), fanout-stream (saturated/b1 only: the
SubmitStream path, one event per request), nats-cluster, nats-single, and the KV
anchors nats-kv-r3-file and nats-kv-r1-memory (natsbench --kv). "others" is the
machine's busy CPU over a measurement minus the CPU of every process this script ran
(the benches and the servers they spawned, from the shell's `times`).
"""
import json
import os
import sys
from collections import defaultdict

ANCHORS = ["nats-cluster", "nats-kv-r3-file", "nats-kv-r1-memory"]
FANOUTS = ["fanout", "fanout-stream"]
MIB = 2 ** 20


def make_row(r, run, seq, workload, system, load, busy0, busy1, own0, own1, t0, t1, skipped=False):
    """One measurement: the bench's result r (None if it failed or was skipped: the
    wall-time budget was spent) and the machine."""
    wall = t1 - t0
    own = own1 - own0
    others = max(0.0, (busy1 - busy0) - own)
    # A bench stopped by MEASURE_TIMEOUT prints what it had, marked interrupted: not ok.
    row = {"run": run, "seq": seq, "workload": workload, "system": system,
           "ok": r is not None and not r.get("interrupted"),
           "load_start": load, "wall_s": round(wall, 2), "machine_busy_s": round(busy1 - busy0, 2),
           "own_cpu_s": round(own, 2), "others_cpu_s": round(others, 2),
           "others_cores": round(others / wall, 2) if wall > 0 else None}
    if r is not None and r.get("interrupted"):
        row.update({"raw": r, "interrupted": True})
        return row
    if r is None:
        row["raw"] = None
        if skipped:
            row["skipped"] = True
        return row
    if "node_memory" in r:  # the memory workload (bench/fanoutmem, natsbench --memory-keys)
        nodes = r["node_memory"]
        row.update({
            "nodes": r.get("nodes"), "keys": r.get("keys"), "payload": r.get("payload"), "load_s": r.get("load_s"),
            "publish_errors": r.get("publish_errors"),
            "baseline_rss_mib_per_node": [round(n["baseline_rss_bytes"] / MIB, 1) for n in nodes],
            "settled_rss_mib_per_node": [round(n["settled_rss_bytes"] / MIB, 1) for n in nodes],
            "bytes_per_key_per_node": [round(n["bytes_per_key"], 1) for n in nodes],
            "bytes_per_key": round(r["bytes_per_key"], 1), "bytes_per_key_node": r.get("bytes_per_key_node"),
            "settle_s": r.get("settle_s"), "baseline_settle_s": r.get("baseline_settle_s"),
            "settle_timed_out": bool(r.get("settle_timed_out")),
        })
        if r.get("stream_server"):
            row["stream_server"] = r["stream_server"]
            row["bytes_per_key_stream_server"] = next(
                (round(n["bytes_per_key"], 1) for n in nodes if n["id"] == r["stream_server"]), None)
        row["raw"] = r
        return row
    subs = r.get("subscribers", 0)
    expected = r["submitted"] * subs
    lost = r.get("lost")
    due = r.get("latency_from_due") or {}
    lag = r.get("send_lag") or {}
    usage = r.get("node_usage") or []
    node_cpu = r.get("node_cpu_seconds")
    row.update({
        "nodes": r.get("nodes"), "subscribers": subs, "rate": r.get("rate"), "batch": r.get("batch"),
        "client": r.get("client"), "window": r.get("window"), "payload": r.get("payload"),
        "submitted": r["submitted"], "delivered": r["delivered"],
        "submitted_per_s": r["submit_per_sec"], "delivered_per_s": r["delivered_per_sec"],
        "p50_us": r["p50_us"], "p99_us": r["p99_us"], "p999_us": r["p999_us"], "max_us": r["max_us"],
        "due_p50_us": due.get("p50_us"), "due_p99_us": due.get("p99_us"), "due_p999_us": due.get("p999_us"),
        "send_lag_p99_us": lag.get("p99_us"), "send_lag_max_us": lag.get("max_us"),
        "lost": lost, "loss": (lost / expected) if lost is not None and expected else None,
        "dropped": r.get("dropped"), "slow_consumers": r.get("slow_consumers"),
        "publish_errors": r.get("publish_errors"), "window_stalls": r.get("window_stalls", 0),
        "node_cpu_s": node_cpu, "bench_cpu_s": r.get("bench_cpu_seconds"),
        "cpu_us_per_delivered": r.get("cpu_us_per_delivered"),
        "cpu_us_per_submitted": (node_cpu * 1e6 / r["submitted"]) if node_cpu and r["submitted"] else None,
        "peak_rss_mib_per_node": [round(u["peak_rss_bytes"] / MIB, 1) for u in usage],
        "peak_rss_mib_max": round((r.get("node_peak_rss_bytes") or 0) / MIB, 1),
    })
    if r.get("converge_ms") is not None:
        row["converge_ms"] = r["converge_ms"]
    row["raw"] = r
    return row


def us(v):
    if v is None:
        return "-"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v} µs"


def num(v, fmt="{:,.0f}"):
    return "-" if v is None else fmt.format(v)


def span(xs):
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f}×" if abs(hi - lo) < 0.005 else f"{lo:.2f}–{hi:.2f}×"


def behind(r):  # a paced publisher that did not keep to its schedule
    return " (behind)" if r.get("rate") and (r.get("send_lag_p99_us") or 0) > 2000 else ""


def ratios(by, runs, workload, key, a, b):
    """a / b of key, within each run that has both."""
    out = []
    for run in runs:
        x, y = by.get((run, workload, a)), by.get((run, workload, b))
        if x and y and x.get(key) and y.get(key):
            out.append(x[key] / y[key])
    return out


def summary(rows, out=sys.stdout):
    def p(*a):
        print(*a, file=out)
    ok = [r for r in rows if r["ok"]]
    failed = [r for r in rows if not r["ok"]]
    timed = [r for r in ok if "bytes_per_key" not in r]
    memory = [r for r in ok if "bytes_per_key" in r]
    by = {(r["run"], r["workload"], r["system"]): r for r in ok}
    runs = sorted({r["run"] for r in rows})
    p()
    p("| run | workload | system | submitted/s | delivered/s | p50 | p99 | p99.9 | p99 from due | lost | CPU µs/delivered | peak RSS MiB/node | others' cores | load |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in timed:
        lost = "-" if r.get("lost") is None else f"{r['lost']:,} ({100 * r['loss']:.2f} %)" if r["loss"] else "0"
        rss = "/".join(f"{x:.0f}" for x in r.get("peak_rss_mib_per_node", [])) or "-"
        p(f"| {r['run']} | {r['workload']} | {r['system']} | {num(r['submitted_per_s'])} | {num(r['delivered_per_s'])} | "
          f"{us(r['p50_us'])} | {us(r['p99_us'])} | {us(r['p999_us'])} | {us(r.get('due_p99_us'))}{behind(r)} | {lost} | "
          f"{num(r.get('cpu_us_per_delivered'), '{:.2f}')} | {rss} | {num(r.get('others_cores'), '{:.2f}')} | {r['load_start']:.2f} |")
    for r in failed:
        what = "SKIPPED (budget)" if r.get("skipped") else "INTERRUPTED (MEASURE_TIMEOUT)" if r.get("interrupted") else "FAILED"
        p(f"| {r['run']} | {r['workload']} | {r['system']} | {what} | | | | | | | | | | {r['load_start']:.2f} |")

    workloads = list(dict.fromkeys(r["workload"] for r in timed))
    p()
    p("fanout / each anchor, same run (range over runs):")
    p()
    p("| workload | fanout | anchor | delivered/s | p50 | p99 | p99.9 | CPU per delivered event | peak RSS per node | runs |")
    p("|---|---|---|---|---|---|---|---|---|---|")
    for w in workloads:
        for f in FANOUTS:
            for a in ANCHORS:
                n = len(ratios(by, runs, w, "delivered_per_s", f, a))
                if not n:
                    continue
                cols = [span(ratios(by, runs, w, k, f, a)) for k in
                        ("delivered_per_s", "p50_us", "p99_us", "p999_us", "cpu_us_per_delivered", "peak_rss_mib_max")]
                p(f"| {w} | {f} | {a} | " + " | ".join(cols) + f" | {n} |")

    if memory:
        p()
        p("memory at the same number of live keys, settled (forced GC, then the scavenger): VmRSS per node, MiB, "
          "before the keys → with them; bytes per live key = (settled − baseline) / keys of the node that grew most:")
        p()
        p("| run | workload | system | baseline MiB/node | settled MiB/node | bytes per key (node) | stream's server: bytes per key | settle s | load s |")
        p("|---|---|---|---|---|---|---|---|---|")
        for r in memory:
            base = "/".join(f"{x:.0f}" for x in r["baseline_rss_mib_per_node"])
            sett = "/".join(f"{x:.0f}" for x in r["settled_rss_mib_per_node"])
            stream = f"{num(r.get('bytes_per_key_stream_server'))} ({r['stream_server']})" if r.get("stream_server") else "-"
            warn = " (timed out)" if r.get("settle_timed_out") else ""
            p(f"| {r['run']} | {r['workload']} | {r['system']} | {base} | {sett} | {num(r['bytes_per_key'])} ({r['bytes_per_key_node']}) | "
              f"{stream} | {num(r.get('settle_s'), '{:.1f}')}{warn} | {num(r.get('load_s'), '{:.1f}')} |")
        p()
        for w in dict.fromkeys(r["workload"] for r in memory):
            for a in ("nats-kv-r1-memory", "nats-kv-r3-file"):
                rs = ratios(by, runs, w, "bytes_per_key", "fanout", a)
                if rs:
                    p(f"{w}: bytes per live key, fanout / {a}: {span(rs)} ({len(rs)} runs)")

    scale = defaultdict(dict)  # (run, system) -> {N: cpu µs per submitted event}
    for r in timed:
        if r["workload"].startswith("scale-") and r.get("cpu_us_per_submitted"):
            scale[(r["run"], r["system"])][r["nodes"]] = r["cpu_us_per_submitted"]
    if scale:
        ns_all = sorted({n for v in scale.values() for n in v})
        p()
        p("scale-out: server CPU µs per submitted event (all nodes), and per added peer (slope from the fewest to the most nodes):")
        p()
        p("| run | system | " + " | ".join(f"N={n}" for n in ns_all) + " | per added peer |")
        p("|---|---|" + "---|" * (len(ns_all) + 1))
        slopes = defaultdict(dict)
        for (run, system), v in sorted(scale.items()):
            ns = sorted(v)
            slope = (v[ns[-1]] - v[ns[0]]) / (ns[-1] - ns[0]) if len(ns) > 1 else None
            slopes[run][system] = slope
            p(f"| {run} | {system} | " + " | ".join(num(v.get(n), "{:.1f}") for n in ns_all) + f" | {num(slope, '{:.2f}')} |")
        rs = [s["fanout"] / s["nats-cluster"] for s in slopes.values() if s.get("fanout") and s.get("nats-cluster")]
        p()
        p(f"added CPU per peer per event, fanout / NATS cluster: {span(rs)}")

    p()
    p("other processes' CPU (the machine's busy CPU minus this script's processes'), per run:")
    for run in runs:
        rr = [r for r in rows if r["run"] == run]
        wall = sum(r["wall_s"] for r in rr)
        others = sum(r.get("others_cpu_s") or 0 for r in rr)
        worst = max(rr, key=lambda r: r.get("others_cores") or 0)
        p(f"  run {run}: {others:.1f} CPU s over {wall:.0f} s of measurements ({others / wall if wall else 0:.2f} cores); "
          f"most: {worst.get('others_cores') or 0:.2f} cores in {worst['workload']} / {worst['system']}")
    if any(behind(r) for r in timed):
        p("\n(behind): the publisher's send lag p99 was over 2 ms: the rate was not offered on time; read that row's latency from the due time")
    skipped = [r for r in failed if r.get("skipped")]
    if len(failed) > len(skipped):
        p(f"\n{len(failed) - len(skipped)} measurement(s) failed: see the .log next to the results")
    if skipped:
        p(f"\n{len(skipped)} measurement(s) skipped: the wall-time budget (BUDGET) was spent before them")


def main(argv):
    if len(argv) >= 2 and argv[1] == "row":
        run, seq, workload, system = int(argv[2]), int(argv[3]), argv[4], argv[5]
        load, busy0, busy1, own0, own1, t0, t1 = map(float, argv[6:13])
        r = json.loads(os.environ.get("RESULT") or "null")
        skipped = bool(os.environ.get("SKIPPED"))
        print(json.dumps(make_row(r, run, seq, workload, system, load, busy0, busy1, own0, own1, t0, t1, skipped)))
    elif len(argv) == 3 and argv[1] == "summary":
        with open(argv[2]) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        summary(rows)
        print(f"\nresults: {argv[2]}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
