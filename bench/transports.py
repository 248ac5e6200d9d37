"""The rows and the summary of bench/transports.sh (make bench-transports).

  python3 bench/transports.py row RUN WORKLOAD N SYSTEM LOAD BUSY0 BUSY1 OWN0 OWN1 T0 T1
      one JSON line on stdout from the bench's JSON in $RESULT ("null": failed)
  python3 bench/transports.py summary RESULTS.jsonl
      the tables: every run, the medians, CPU per added node (least squares over N, per
      run), the N where the JetStream transport becomes cheaper, and the anchor

CPU figures: "cluster" is every process the events go through but the bench client
itself: the sidecars, and on the JetStream transport the NATS servers too (engine);
"origin" is the sidecar the publisher submits to (bench-0). The nats-kv rows are the
anchor, a plain NATS KV client (natsbench --kv): its CPU is the NATS servers' alone. Per submitted event is per
event the publisher submitted in the measured window; per delivered, per event a
subscriber received (submitted x (N - 1) when nothing is lost).
"""
import json
import os
import statistics
import sys

NOISY = float(os.environ.get("NOISY", "0.5"))  # others' cores


def make_row(r, run, workload, nodes, system, load, busy0, busy1, own0, own1, t0, t1):
    """One measurement: the bench's result r (None if it failed) and the machine."""
    wall = t1 - t0
    others = max(0.0, (busy1 - busy0) - (own1 - own0))
    row = {
        "run": run, "workload": workload, "nodes": nodes, "system": system, "ok": r is not None,
        "load_start": load, "wall_s": round(wall, 2), "machine_busy_s": round(busy1 - busy0, 2),
        "own_cpu_s": round(own1 - own0, 2), "others_cores": round(others / wall, 2) if wall > 0 else None,
    }
    row["noisy"] = row["others_cores"] is not None and row["others_cores"] > NOISY
    if r is None:
        return row
    usage = r.get("node_usage") or []
    engine = r.get("engine_usage") or []
    nodes_cpu = r.get("node_cpu_seconds") or 0.0
    engine_cpu = r.get("engine_cpu_seconds") or 0.0
    origin = None
    if system == "nats-kv":  # natsbench's nodes are the NATS servers: all engine
        engine, usage, engine_cpu, nodes_cpu = usage, [], nodes_cpu, 0.0
    elif usage:
        origin = usage[0]["cpu_seconds"]
    cluster = nodes_cpu + engine_cpu
    sub, dlv = r.get("submitted") or 0, r.get("delivered") or 0
    subs = r.get("subscribers") or 0
    expected = sub * subs

    def per(cpu, n):
        return round(cpu * 1e6 / n, 2) if cpu is not None and n else None

    row.update({
        "submitted": sub, "delivered": dlv, "subscribers": subs,
        "submitted_per_s": r.get("submit_per_sec"), "delivered_per_s": r.get("delivered_per_sec"),
        "p50_us": r.get("p50_us"), "p99_us": r.get("p99_us"), "p999_us": r.get("p999_us"),
        "due_p99_us": (r.get("latency_from_due") or {}).get("p99_us"),
        "send_lag_p99_us": (r.get("send_lag") or {}).get("p99_us"),
        "lost": r.get("lost"), "loss": (r["lost"] / expected) if r.get("lost") is not None and expected else None,
        "publish_errors": r.get("publish_errors"),
        "nodes_cpu_s": nodes_cpu, "engine_cpu_s": engine_cpu, "cluster_cpu_s": round(cluster, 3),
        "origin_cpu_s": origin, "bench_cpu_s": r.get("bench_cpu_seconds"),
        "cluster_us_per_submitted": per(cluster, sub), "cluster_us_per_delivered": per(cluster, dlv),
        "engine_us_per_submitted": per(engine_cpu, sub) if engine else None,
        "origin_us_per_submitted": per(origin, sub),
        "sidecar_conns": [u.get("tcp_conns") for u in usage],
        "engine_conns": [u.get("tcp_conns") for u in engine],
        "sidecar_peak_rss_mib": max((u["peak_rss_bytes"] for u in usage), default=0) / 2**20,
        "engine_peak_rss_mib": max((u["peak_rss_bytes"] for u in engine), default=0) / 2**20,
    })
    return row


def fit(points):
    """Least-squares line through (x, y) points: (intercept, slope); None if < 2 x."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return my - slope * mx, slope


def crossover(a, b):
    """The N from which line b = (intercept, slope) is below line a, or None if b
    never becomes cheaper for growing N (its slope is not the smaller)."""
    (a0, a1), (b0, b1) = a, b
    if a1 <= b1:
        return None
    return max((b0 - a0) / (a1 - b1), 0.0)


def first_cheaper(by_n_a, by_n_b):
    """The smallest measured N where b's figure is below a's, else None."""
    for n in sorted(set(by_n_a) & set(by_n_b)):
        if by_n_b[n] < by_n_a[n]:
            return n
    return None


def fmt(v, f="{:.1f}"):
    return "-" if v is None else f.format(v)


def us(v):
    if v is None:
        return "-"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v} µs"


def conns(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def summary(rows, out=sys.stdout):
    p = lambda *a: print(*a, file=out)
    fixed = [r for r in rows if r["ok"] and r["workload"] != "saturated"]
    sat = [r for r in rows if r["ok"] and r["workload"] == "saturated"]
    failed = [r for r in rows if not r["ok"]]
    if fixed:
        p(f"\nfixed rate ({fixed[0]['workload']}): every run; CPU in µs per event, cluster = sidecars + NATS servers")
        p()
        p("| run | N | transport | others (cores) | p50 | p99 | cluster /submitted | cluster /delivered | of it NATS /submitted | origin /submitted | TCP conns per sidecar | per NATS server | lost |")
        p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sorted(fixed, key=lambda r: (r["run"], r["nodes"], r["system"])):
            p(f"| {r['run']} | {r['nodes']} | {r['system']} | {fmt(r['others_cores'], '{:.2f}')}{' noisy' if r['noisy'] else ''} | "
              f"{us(r['p50_us'])} | {us(r['p99_us'])} | {fmt(r['cluster_us_per_submitted'])} | {fmt(r['cluster_us_per_delivered'])} | "
              f"{fmt(r['engine_us_per_submitted'])} | {fmt(r['origin_us_per_submitted'])} | {conns(r['sidecar_conns'])} | "
              f"{conns(r['engine_conns'])} | {r['lost']} |")
        # Medians over the runs (the quiet ones when there are some).
        groups = {}
        for r in fixed:
            groups.setdefault((r["nodes"], r["system"]), []).append(r)
        med = {}
        p("\nmedians over the runs (noisy runs left out when a quiet one exists):")
        p()
        p("| N | transport | runs | p50 | p99 | cluster µs/submitted | cluster µs/delivered | origin µs/submitted |")
        p("|---|---|---|---|---|---|---|---|")
        for (n, s), rs in sorted(groups.items()):
            quiet = [r for r in rs if not r["noisy"]] or rs
            m = lambda k: statistics.median([r[k] for r in quiet if r.get(k) is not None]) if any(r.get(k) is not None for r in quiet) else None
            med[(n, s)] = {k: m(k) for k in ("p50_us", "p99_us", "cluster_us_per_submitted", "cluster_us_per_delivered", "origin_us_per_submitted")}
            d = med[(n, s)]
            p(f"| {n} | {s} | {len(quiet)}/{len(rs)} | {us(d['p50_us'] and round(d['p50_us']))} | {us(d['p99_us'] and round(d['p99_us']))} | "
              f"{fmt(d['cluster_us_per_submitted'])} | {fmt(d['cluster_us_per_delivered'])} | {fmt(d['origin_us_per_submitted'])} |")
        # Slopes per run, and the crossover.
        p("\nCPU per added node (µs per submitted event; least squares over N, per run) and where JetStream becomes cheaper:")
        p()
        p("| run | mesh cluster slope | jetstream cluster slope | nats-kv cluster slope | mesh origin slope | jetstream origin slope | crossover N (fit) | first measured N where jetstream is cheaper |")
        p("|---|---|---|---|---|---|---|---|")
        for run in sorted({r["run"] for r in fixed}):
            lines, firsts = {}, {}
            for s in ("mesh", "jetstream", "nats-kv"):
                rs = [r for r in fixed if r["run"] == run and r["system"] == s]
                lines[s] = {k: fit([(r["nodes"], r[k]) for r in rs if r.get(k) is not None])
                            for k in ("cluster_us_per_submitted", "origin_us_per_submitted")}
                firsts[s] = {r["nodes"]: r["cluster_us_per_submitted"] for r in rs if r.get("cluster_us_per_submitted") is not None}
            cm, cj = lines["mesh"]["cluster_us_per_submitted"], lines["jetstream"]["cluster_us_per_submitted"]
            om, oj = lines["mesh"]["origin_us_per_submitted"], lines["jetstream"]["origin_us_per_submitted"]
            x = crossover(cm, cj) if cm and cj else None
            ck = lines["nats-kv"]["cluster_us_per_submitted"]
            p(f"| {run} | {fmt(cm and cm[1])} | {fmt(cj and cj[1])} | {fmt(ck and ck[1])} | {fmt(om and om[1])} | {fmt(oj and oj[1])} | "
              f"{fmt(x)} | {fmt(first_cheaper(firsts['mesh'], firsts['jetstream']), '{}')} |")
    if sat:
        p("\nthe anchor: saturated, the JetStream transport against a NATS KV client doing the same work (same servers, same N):")
        p()
        p("| run | system | others (cores) | submitted/s | delivered/s | p50 | p99 | lost | cluster µs/delivered |")
        p("|---|---|---|---|---|---|---|---|---|")
        for r in sorted(sat, key=lambda r: (r["run"], r["system"])):
            p(f"| {r['run']} | {r['system']} | {fmt(r['others_cores'], '{:.2f}')}{' noisy' if r['noisy'] else ''} | "
              f"{fmt(r['submitted_per_s'], '{:,.0f}')} | {fmt(r['delivered_per_s'], '{:,.0f}')} | {us(r['p50_us'])} | {us(r['p99_us'])} | "
              f"{r['lost']} | {fmt(r['cluster_us_per_delivered'])} |")
        ratios = []
        for run in sorted({r["run"] for r in sat}):
            by = {r["system"]: r for r in sat if r["run"] == run}
            if "jetstream" in by and "nats-kv" in by and by["nats-kv"]["delivered_per_s"]:
                ratios.append(by["jetstream"]["delivered_per_s"] / by["nats-kv"]["delivered_per_s"])
        if ratios:
            p(f"\ndelivered/s, JetStream transport / NATS KV client, per run: {', '.join(f'{x:.2f}' for x in ratios)}")
    if failed:
        p(f"\n{len(failed)} measurement(s) failed: " + ", ".join(f"run {r['run']} {r['workload']} N={r['nodes']} {r['system']}" for r in failed))


def main(argv):
    if len(argv) >= 2 and argv[1] == "row" and len(argv) == 13:
        run, workload, n, system = int(argv[2]), argv[3], int(argv[4]), argv[5]
        load, b0, b1, o0, o1, t0, t1 = map(float, argv[6:13])
        r = json.loads(os.environ.get("RESULT") or "null")
        print(json.dumps(make_row(r, run, workload, n, system, load, b0, b1, o0, o1, t0, t1)))
        return 0
    if len(argv) == 3 and argv[1] == "summary":
        rows = [json.loads(l) for l in open(argv[2]) if l.strip()]
        summary(rows)
        print(f"\nresults: {argv[2]}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
