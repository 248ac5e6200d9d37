#!/usr/bin/env bash
# make bench-compare: fanout against a NATS cluster (and a single NATS server), on this
# machine, with one pacer, one stamping rule and one flow control shared by both clients
# (bench/loadkit). docs/BENCH.md ("make bench-compare") explains the method.
#
#   bash bench/compare.sh            # RUNS (3) interleaved runs; ~4 min per run
#   bash bench/compare.sh --quick    # smoke test: 1 run, 2 s per measurement, no quiet wait
#
# Layout, for every N: fanout = `sidecar bench --spawn N` (submit on node 0, a subscriber
# on each other node); nats-cluster = `natsbench --spawn N` (N nats-server processes with
# routes, publisher on server 0, a subscriber on each other server); nats-single = one
# nats-server with the same N-1 subscribers on it.
#
# Workloads (each with one event per send and with 10 per send, BATCHES):
#   saturated      --rate 0, flow-controlled end to end: at most WINDOW events sent and
#                  not yet received by every subscriber (fanout: also PIPELINE requests
#                  in flight), so neither system is overrun; loss is its own column
#   latency@RATE   LAT_RATE events/s, open loop
#   scale-N        N in SCALE_NODES nodes at SCALE_RATE events/s, SCALE_BATCH per send:
#                  CPU per delivered event and per added peer
# EXTRAS=1 adds the older rows: Eureka's pacing (saturated, latency) and hot keys.
#
# Each run measures every workload, fanout first in odd runs and NATS first in even
# ones, after waiting for a quiet machine (bench/quiet.sh). Every measurement is one JSON
# line in bench/results/compare-<UTC time>.jsonl; a summary with the fanout/NATS-cluster
# ratios of each run is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=${QUICK:-0}
for arg in "$@"; do
  case $arg in
    --quick) QUICK=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown argument $arg (--quick, or environment variables)" >&2; exit 2 ;;
  esac
done
if [ "$QUICK" = 1 ]; then
  : "${RUNS:=1}" "${DURATION:=2s}" "${WARMUP:=500ms}" "${QUIET_WAIT:=0}" "${DRAIN_TIMEOUT:=5s}"
fi
RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}      # measured time per measurement
WARMUP=${WARMUP:-1s}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-10s}
PAYLOAD=${PAYLOAD:-100}        # bytes per event
BATCHES=${BATCHES:-1 10}       # events per send
LAT_RATE=${LAT_RATE:-10000}    # events/s of the latency workload
WINDOW=${WINDOW:-5000}         # saturated: events outstanding end to end
PIPELINE=${PIPELINE:-256}      # saturated fanout: SubmitRequests in flight
SCALE_NODES=${SCALE_NODES:-3 5 9}
SCALE_RATE=${SCALE_RATE:-2000}
SCALE_BATCH=${SCALE_BATCH:-1}
WORKLOADS=${WORKLOADS:-saturated latency scale}
EXTRAS=${EXTRAS:-0}
KEYS=${KEYS:-1000}             # EXTRAS: task_ids of the hot-key rows
OUT=${OUT:-bench/results}
export QUIET_WAIT

mkdir -p "$OUT" bin
stamp=$(date -u +%Y%m%dT%H%M%SZ)
results="$OUT/compare-$stamp.jsonl"
log="$OUT/compare-$stamp.log" # the benches' stderr (live lines, errors)

if [ -f bench/quiet.sh ]; then
  # shellcheck source=bench/quiet.sh
  . bench/quiet.sh
else
  wait_quiet() { quiet_load=$(cut -d' ' -f1 /proc/loadavg); }
  busy_s() { awk '/^cpu /{printf "%.2f", ($2+$3+$4+$7+$8+$9)/100; exit}' /proc/stat; }
fi

if ! command -v nats-server >/dev/null; then
  echo "installing Debian's nats-server" >&2
  apt-get update -q >/dev/null && apt-get install -y -q nats-server >/dev/null
fi
go build -o bin/sidecar ./cmd/sidecar
(cd bench/natsbench && go build -o ../../bin/natsbench .)

common=(--duration "$DURATION" --warmup "$WARMUP" --payload "$PAYLOAD" --drain-timeout "$DRAIN_TIMEOUT")
eureka=(-- --max-batching-delay=500ms --workers=20)

run=0
seq=0
# measure WORKLOAD SYSTEM COMMAND...: one measurement, one JSON line.
measure() {
  local workload=$1 system=$2; shift 2
  seq=$((seq + 1))
  echo "== run $run: $workload / $system" >&2
  echo "== run $run #$seq: $workload / $system: $*" >>"$log"
  local load busy0 busy1 t0 t1 json
  load=$(cut -d' ' -f1 /proc/loadavg)
  busy0=$(busy_s)
  t0=$(date +%s.%N)
  if ! json=$("$@" 2>>"$log" | tail -1) || [ -z "$json" ]; then
    echo "   FAILED (see $log)" >&2
    json=null
  fi
  t1=$(date +%s.%N)
  busy1=$(busy_s)
  RESULT=$json python3 - "$results" "$run" "$seq" "$workload" "$system" "$load" "$busy0" "$busy1" "$t0" "$t1" <<'PY'
import json, os, sys
path, run, seq, workload, system, load, b0, b1, t0, t1 = sys.argv[1:]
r = json.loads(os.environ["RESULT"])
row = {"run": int(run), "seq": int(seq), "workload": workload, "system": system,
       "load_start": float(load), "wall_s": round(float(t1) - float(t0), 2),
       "machine_busy_s": round(float(b1) - float(b0), 2), "ok": r is not None}
if r:
    subs = r.get("subscribers", 0)
    expected = r["submitted"] * subs
    lost = r.get("lost")
    due = r.get("latency_from_due") or {}
    lag = r.get("send_lag") or {}
    usage = r.get("node_usage") or []
    row.update({
        "nodes": r.get("nodes"), "subscribers": subs, "rate": r.get("rate"), "batch": r.get("batch"),
        "window": r.get("window"), "payload": r.get("payload"),
        "submitted": r["submitted"], "delivered": r["delivered"],
        "submitted_per_s": r["submit_per_sec"], "delivered_per_s": r["delivered_per_sec"],
        "p50_us": r["p50_us"], "p99_us": r["p99_us"], "p999_us": r["p999_us"], "max_us": r["max_us"],
        "due_p50_us": due.get("p50_us"), "due_p99_us": due.get("p99_us"), "due_p999_us": due.get("p999_us"),
        "send_lag_p99_us": lag.get("p99_us"), "send_lag_max_us": lag.get("max_us"),
        "lost": lost, "loss": (lost / expected) if lost is not None and expected else None,
        "dropped": r.get("dropped"), "slow_consumers": r.get("slow_consumers"),
        "window_stalls": r.get("window_stalls", 0),
        "node_cpu_s": r.get("node_cpu_seconds"), "bench_cpu_s": r.get("bench_cpu_seconds"),
        "cpu_us_per_delivered": r.get("cpu_us_per_delivered"),
        "cpu_us_per_submitted": (r["node_cpu_seconds"] * 1e6 / r["submitted"]) if r.get("node_cpu_seconds") and r["submitted"] else None,
        "peak_rss_mib_per_node": [round(u["peak_rss_bytes"] / 2**20, 1) for u in usage],
        "peak_rss_mib_max": round(r.get("node_peak_rss_bytes", 0) / 2**20, 1),
    })
    if r.get("converge_ms") is not None:
        row["converge_ms"] = r["converge_ms"]
row["raw"] = r
with open(path, "a") as f:
    f.write(json.dumps(row) + "\n")
PY
}

# one_run: every workload once, fanout's systems first (or NATS's, when $1 = nats).
one_run() {
  local first=$1 w b n
  for w in $WORKLOADS; do
    case $w in
      saturated)
        for b in $BATCHES; do
          sys_fanout=(fanout bin/sidecar bench --spawn 3 --json "${common[@]}" --rate 0 --batch "$b" --window "$WINDOW" --pipeline "$PIPELINE")
          sys_nc=(nats-cluster bin/natsbench --spawn 3 "${common[@]}" --rate 0 --batch "$b" --window "$WINDOW" --interval 0)
          sys_ns=(nats-single bin/natsbench --spawn 1 --subscribers 2 "${common[@]}" --rate 0 --batch "$b" --window "$WINDOW" --interval 0)
          both "saturated/b$b" "$first" "$([ "$EXTRAS" = 1 ] && echo eureka)"
        done
        ;;
      latency)
        for b in $BATCHES; do
          sys_fanout=(fanout bin/sidecar bench --spawn 3 --json "${common[@]}" --rate "$LAT_RATE" --batch "$b")
          sys_nc=(nats-cluster bin/natsbench --spawn 3 "${common[@]}" --rate "$LAT_RATE" --batch "$b" --interval 0)
          sys_ns=(nats-single bin/natsbench --spawn 1 --subscribers 2 "${common[@]}" --rate "$LAT_RATE" --batch "$b" --interval 0)
          both "latency@$LAT_RATE/b$b" "$first" "$([ "$EXTRAS" = 1 ] && echo eureka)"
        done
        ;;
      scale)
        for n in $SCALE_NODES; do
          sys_fanout=(fanout bin/sidecar bench --spawn "$n" --json "${common[@]}" --rate "$SCALE_RATE" --batch "$SCALE_BATCH")
          sys_nc=(nats-cluster bin/natsbench --spawn "$n" "${common[@]}" --rate "$SCALE_RATE" --batch "$SCALE_BATCH" --interval 0)
          sys_ns=()
          both "scale-$n@$SCALE_RATE/b$SCALE_BATCH" "$first" ""
        done
        ;;
      *) echo "compare.sh: unknown workload $w (saturated, latency, scale)" >&2; exit 2 ;;
    esac
  done
  if [ "$EXTRAS" = 1 ]; then
    # Hot keys: coalescing is the point, so no window (it counts every event) and no
    # loss column; fanout only, with the defaults and with a 100 ms coalescing window.
    measure "hot-keys($KEYS)" fanout bin/sidecar bench --spawn 3 --json "${common[@]}" --rate 0 --keys "$KEYS"
    measure "hot-keys($KEYS)" fanout-100ms-window bin/sidecar bench --spawn 3 --json "${common[@]}" --rate 0 --keys "$KEYS" --batch 1000 \
      -- --max-batching-delay=100ms --batch-idle-flush=5ms --max-batch=$((KEYS * 5))
  fi
}

# both WORKLOAD FIRST EXTRA: the fanout row (and Eureka's pacing with EXTRA=eureka),
# then the NATS rows, or the other way round.
both() {
  local workload=$1 first=$2 extra=$3
  fanout_rows() {
    measure "$workload" "${sys_fanout[@]}"
    if [ "$extra" = eureka ]; then
      measure "$workload" eureka-pacing "${sys_fanout[@]:1}" "${eureka[@]}"
    fi
  }
  nats_rows() {
    measure "$workload" "${sys_nc[@]}"
    if [ ${#sys_ns[@]} -gt 0 ]; then measure "$workload" "${sys_ns[@]}"; fi
  }
  if [ "$first" = nats ]; then nats_rows; fanout_rows; else fanout_rows; nats_rows; fi
}

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3), $(nats-server --version)" | tee -a "$log" >&2
echo "results: $results (stderr of the benches: $log)" >&2
for run in $(seq "$RUNS"); do
  wait_quiet
  if [ $((run % 2)) = 1 ]; then one_run fanout; else one_run nats; fi
done

python3 - "$results" "$LAT_RATE" <<'PY'
import json, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
ok = [r for r in rows if r["ok"]]
failed = [r for r in rows if not r["ok"]]

def us(v):
    if v is None: return "-"
    return f"{v/1000:.2f} ms" if v >= 1000 else f"{v} µs"

def num(v, fmt="{:,.0f}"):
    return "-" if v is None else fmt.format(v)

def behind(r):  # a paced publisher that did not keep to its schedule
    return " (behind)" if r.get("rate") and (r.get("send_lag_p99_us") or 0) > 2000 else ""

print()
print("| run | workload | system | submitted/s | delivered/s | p50 | p99 | p99.9 | p99 from due | lost | CPU µs/delivered | peak RSS MiB/node | load |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in ok:
    lost = "-" if r.get("lost") is None else f"{r['lost']:,} ({100*r['loss']:.2f} %)" if r["loss"] else "0"
    rss = "/".join(f"{x:.0f}" for x in r.get("peak_rss_mib_per_node", [])) or "-"
    print(f"| {r['run']} | {r['workload']} | {r['system']} | {num(r['submitted_per_s'])} | {num(r['delivered_per_s'])} | "
          f"{us(r['p50_us'])} | {us(r['p99_us'])} | {us(r['p999_us'])} | {us(r.get('due_p99_us'))}{behind(r)} | {lost} | "
          f"{num(r.get('cpu_us_per_delivered'), '{:.2f}')} | {rss} | {r['load_start']:.2f} |")
for r in failed:
    print(f"| {r['run']} | {r['workload']} | {r['system']} | FAILED | | | | | | | | | {r['load_start']:.2f} |")

# fanout / nats-cluster, within each run.
by = {(r["run"], r["workload"], r["system"]): r for r in ok}
workloads = list(dict.fromkeys(r["workload"] for r in ok))
runs = sorted({r["run"] for r in ok})
def ratios(w, key, b="nats-cluster"):
    out = []
    for run in runs:
        f, n = by.get((run, w, "fanout")), by.get((run, w, b))
        if f and n and f.get(key) and n.get(key):
            out.append(f[key] / n[key])
    return out
def span(xs):
    if not xs: return "-"
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f}×" if abs(hi - lo) < 0.005 else f"{lo:.2f}–{hi:.2f}×"

print()
print("fanout / NATS cluster, same run (range over runs):")
print()
print("| workload | delivered/s | p50 | p99 | p99.9 | CPU per delivered event | peak RSS per node | runs |")
print("|---|---|---|---|---|---|---|---|")
for w in workloads:
    print(f"| {w} | {span(ratios(w, 'delivered_per_s'))} | {span(ratios(w, 'p50_us'))} | {span(ratios(w, 'p99_us'))} | "
          f"{span(ratios(w, 'p999_us'))} | {span(ratios(w, 'cpu_us_per_delivered'))} | {span(ratios(w, 'peak_rss_mib_max'))} | "
          f"{len(ratios(w, 'delivered_per_s'))} |")

# Scale-out: CPU per submitted event against N, and what each added peer adds.
scale = defaultdict(dict)  # (run, system) -> {N: cpu µs per submitted event}
for r in ok:
    if r["workload"].startswith("scale-") and r.get("cpu_us_per_submitted"):
        scale[(r["run"], r["system"])][r["nodes"]] = r["cpu_us_per_submitted"]
if scale:
    print()
    print("scale-out: server CPU µs per submitted event (all nodes), and per added peer (slope from the fewest to the most nodes):")
    print()
    print("| run | system | " + " | ".join(f"N={n}" for n in sorted({n for v in scale.values() for n in v})) + " | per added peer |")
    ns_all = sorted({n for v in scale.values() for n in v})
    print("|---|---|" + "---|" * (len(ns_all) + 1))
    slopes = defaultdict(dict)
    for (run, system), v in sorted(scale.items()):
        ns = sorted(v)
        slope = (v[ns[-1]] - v[ns[0]]) / (ns[-1] - ns[0]) if len(ns) > 1 else None
        slopes[run][system] = slope
        print(f"| {run} | {system} | " + " | ".join(num(v.get(n), "{:.1f}") for n in ns_all) + f" | {num(slope, '{:.2f}')} |")
    rs = [s["fanout"] / s["nats-cluster"] for s in slopes.values() if s.get("fanout") and s.get("nats-cluster")]
    print()
    print(f"added CPU per peer per event, fanout / NATS cluster: {span(rs)}")
if any(behind(r) for r in ok):
    print("\n(behind): the publisher's send lag p99 was over 2 ms: the rate was not offered on time; read that row's latency from the due time")
if failed:
    print(f"\n{len(failed)} measurement(s) failed: see the .log next to the results")
print(f"\nresults: {sys.argv[1]}")
PY
