#!/usr/bin/env bash
# Issue 10's cost of durability: `sidecar bench --spawn 3` of one build without and
# with --data-dir (each node its own directory under DATA, fresh for every run: ext4
# here, fsynced commits), RUNS interleaved pairs per workload: saturated (--rate 0)
# and 10,000 events/s. Each pair waits for a quiet machine (bench/quiet.sh); every
# run's JSON line goes to $OUT/datadir-ab-<time>.jsonl with the load average it
# started at and the CPU seconds other processes used during it. Prints a markdown
# table.
#   BIN (/tmp/datadir-sidecar, built from HEAD), RUNS (3), DURATION (6s), WARMUP (1s),
#   WORKLOADS ("0 10000": the --rate of each), DATA (/var/tmp), OUT (bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/quiet.sh
BIN=${BIN:-/tmp/datadir-sidecar}
RUNS=${RUNS:-3} DURATION=${DURATION:-6s} WARMUP=${WARMUP:-1s} WORKLOADS=${WORKLOADS:-0 10000}
DATA=${DATA:-/var/tmp} OUT=${OUT:-bench/results}
mkdir -p "$OUT"
results="$OUT/datadir-ab-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
go build -o "$BIN" ./cmd/sidecar
rev=$(git rev-parse --short HEAD)
dir="$DATA/datadir-ab-$$"

for rate in $WORKLOADS; do
  for i in $(seq "$RUNS"); do
    wait_quiet
    for side in memory data-dir; do
      flags=()
      rm -rf "$dir"
      [ "$side" = data-dir ] && flags=(--serve-flag="--data-dir=$dir/{id}")
      echo "== rate $rate run $i: $side" >&2
      load=$(cut -d' ' -f1 /proc/loadavg) b0=$(busy_s)
      json=$("$BIN" bench --spawn 3 --duration "$DURATION" --warmup "$WARMUP" --rate "$rate" "${flags[@]}" --json 2>/dev/null | tail -1)
      b1=$(busy_s)
      disk=$(du -sb "$dir" 2>/dev/null | cut -f1 || true)
      rm -rf "$dir"
      other=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%.2f" % (float(sys.argv[3])-float(sys.argv[2])-r["node_cpu_seconds"]-r["bench_cpu_seconds"]))' "$json" "$b0" "$b1")
      echo "{\"rate\":$rate,\"side\":\"$side\",\"rev\":\"$rev\",\"run\":$i,\"load1\":$load,\"other_cpu_s\":$other,\"disk_bytes\":${disk:-0},\"result\":$json}" >>"$results"
    done
  done
done

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3), $(df -T "$DATA" | awk 'NR==2{print $2}')"
echo "results: $results"
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| rate | run | nodes | load1 at start | others' CPU s | submitted/s | delivered/s | p50 µs | p99 µs | CPU µs/delivered | node peak RSS MiB | data dirs MiB | dropped |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    x = r["result"]
    print(f"| {r['rate'] or 'saturated'} | {r['run']} | {r['side']} | {r['load1']:.2f} | {r['other_cpu_s']:.1f} | {x['submit_per_sec']:,.0f} | "
          f"{x['delivered_per_sec']:,.0f} | {x['p50_us']:,} | {x['p99_us']:,} | {x['cpu_us_per_delivered']:.2f} | "
          f"{x['node_peak_rss_bytes']/2**20:.0f} | {r['disk_bytes']/2**20:.0f} | {x['dropped']} |")
PY
