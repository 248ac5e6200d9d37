#!/usr/bin/env bash
# make bench-compare: fanout against NATS core and against Eureka's pacing, on this
# machine, in one run, with the same layout: one publisher, two subscribers on two other
# nodes (NATS: two subscriber connections to one server), same payload, rate, duration.
# Prints a markdown table (for docs/BENCHMARKS.md) and keeps the JSON lines in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}  # measured time per run
WARMUP=${WARMUP:-1s}
PAYLOAD=${PAYLOAD:-100}    # bytes
LAT_RATE=${LAT_RATE:-10000} # events/s offered for the latency runs
KEYS=${KEYS:-1000}          # task_ids of the hot-key runs
OUT=${OUT:-bench/results}
mkdir -p "$OUT" bin
results="$OUT/compare-$(date -u +%Y%m%dT%H%M%SZ).jsonl"

if ! command -v nats-server >/dev/null; then
  echo "installing Debian's nats-server" >&2
  apt-get update -q >/dev/null && apt-get install -y -q nats-server >/dev/null
fi
go build -o bin/sidecar ./cmd/sidecar
(cd bench/natsbench && go build -o ../../bin/natsbench .)

# nats-server on a random loopback port (-p -1), read back from its log.
natslog=$(mktemp)
nats-server -a 127.0.0.1 -p -1 >"$natslog" 2>&1 &
natspid=$!
trap 'kill $natspid 2>/dev/null; rm -f "$natslog"' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's/.*Listening for client connections on 127.0.0.1:\([0-9]*\).*/\1/p' "$natslog")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "${port:-}" ] || { echo "nats-server did not start:"; cat "$natslog"; exit 1; }

run() { # workload system command...
  local workload=$1 system=$2; shift 2
  echo "== $workload / $system" >&2
  local json
  json=$("$@" 2>/dev/null | tail -1)
  echo "{\"workload\":\"$workload\",\"system\":\"$system\",\"result\":$json}" >>"$results"
}
common=(--duration "$DURATION" --warmup "$WARMUP" --payload "$PAYLOAD")
nats=(bin/natsbench --url "nats://127.0.0.1:$port" --subscribers 2 --server-pid "$natspid" "${common[@]}")
fanout=(bin/sidecar bench --spawn 3 --json "${common[@]}")
eureka=(-- --max-batching-delay=500ms --workers=20)

run saturated nats-core "${nats[@]}" --rate 0
run saturated fanout "${fanout[@]}" --rate 0
run saturated eureka-pacing "${fanout[@]}" --rate 0 "${eureka[@]}"
run "latency@$LAT_RATE/s" nats-core "${nats[@]}" --rate "$LAT_RATE"
run "latency@$LAT_RATE/s" fanout "${fanout[@]}" --rate "$LAT_RATE"
run "latency@$LAT_RATE/s" eureka-pacing "${fanout[@]}" --rate "$LAT_RATE" "${eureka[@]}"
run "hot-keys($KEYS)" nats-core "${nats[@]}" --rate 0
run "hot-keys($KEYS)" fanout "${fanout[@]}" --rate 0 --keys "$KEYS"
# A 100 ms coalescing window: max-batch above the key count, so the delay (not the size
# rule) decides when a batch is due, and each key goes out at most once per window per
# peer; --batch-idle-flush sends the tail 5 ms after the publisher stops instead of
# waiting out the window. 1000 events per request: a publisher of hot keys batches.
run "hot-keys($KEYS)" fanout-100ms-window "${fanout[@]}" --rate 0 --keys "$KEYS" --batch 1000 \
  -- --max-batching-delay=100ms --batch-idle-flush=5ms --max-batch=$((KEYS * 5))

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3), $(nats-server --version)"
echo "results: $results"
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["workload"], r["system"]): r["result"] for r in rows}
print("| workload | system | submitted/s | delivered/s | p50 µs | p99 µs | wire events / submitted (per peer) | converge ms | CPU µs/delivered | peak RSS MiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    x = r["result"]
    wire = x.get("wire_events", x.get("delivered", 0))
    sub = max(1, x.get("submitted", 1))
    rss = x.get("node_peak_rss_bytes", x.get("peak_rss_bytes", 0)) / 2**20
    cpu = x.get("cpu_us_per_delivered", 0)
    conv = x.get("converge_ms", "")
    print(f"| {r['workload']} | {r['system']} | {x.get('submit_per_sec', 0):,.0f} | {x['delivered_per_sec']:,.0f} | {x['p50_us']:,} | {x['p99_us']:,} | "
          f"{wire/sub:.3f} ({wire/sub/2:.3f}) | {conv if conv == '' else f'{conv:.1f}'} | {cpu:.2f} | {rss:.0f} |")
def ratio(w, a, b, k):
    try: return by[(w, a)][k] / by[(w, b)][k]
    except (KeyError, ZeroDivisionError): return float("nan")
print()
sat = [w for (w, s) in by if w == "saturated"]
lat = [w for (w, s) in by if w.startswith("latency")]
if sat:
    print(f"saturated delivered/s: fanout/NATS = {ratio('saturated','fanout','nats-core','delivered_per_sec'):.2f}x, "
          f"fanout/Eureka pacing = {ratio('saturated','fanout','eureka-pacing','delivered_per_sec'):.2f}x")
if lat:
    w = lat[0]
    print(f"{w} p50: Eureka pacing/fanout = {ratio(w,'eureka-pacing','fanout','p50_us'):.0f}x lower with fanout; "
          f"fanout p99 = {by[(w,'fanout')]['p99_us']/1000:.2f} ms")
PY
