#!/usr/bin/env bash
# Issue 9's end-to-end A/B: `sidecar bench --spawn 3` with the version table + inbox
# (OLD_REV, d2d88a0: the last commit before the state table) against the state table
# (NEW_REV, HEAD), RUNS interleaved pairs per workload: saturated (--rate 0) and
# 10,000 events/s. Each pair waits for a quiet machine (bench/quiet.sh); every run's
# JSON line goes to $OUT/state-ab-<time>.jsonl with the load average it started at and
# the CPU seconds other processes used during it. Prints a markdown table.
#   OLD_REV, NEW_REV, OLD_BIN (/tmp/old-sidecar), NEW_BIN (/tmp/new-sidecar),
#   RUNS (3), DURATION (6s), WARMUP (1s), WORKLOADS ("0 10000": the --rate of each)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/quiet.sh
OLD_REV=${OLD_REV:-d2d88a0} NEW_REV=${NEW_REV:-HEAD}
OLD_BIN=${OLD_BIN:-/tmp/old-sidecar} NEW_BIN=${NEW_BIN:-/tmp/new-sidecar}
RUNS=${RUNS:-3} DURATION=${DURATION:-6s} WARMUP=${WARMUP:-1s} WORKLOADS=${WORKLOADS:-0 10000}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
results="$OUT/state-ab-$(date -u +%Y%m%dT%H%M%SZ).jsonl"

build() { # rev binary: build cmd/sidecar of rev from a clean export of the commit
  local src
  src=$(mktemp -d)
  git archive "$1" | tar -x -C "$src"
  (cd "$src" && go build -o "$2" ./cmd/sidecar)
  rm -rf "$src"
}
build "$OLD_REV" "$OLD_BIN"
build "$NEW_REV" "$NEW_BIN"
old=$(git rev-parse --short "$OLD_REV") new=$(git rev-parse --short "$NEW_REV")

for rate in $WORKLOADS; do
  for i in $(seq "$RUNS"); do
    wait_quiet
    for side in old new; do
      bin=$OLD_BIN rev=$old
      [ "$side" = new ] && bin=$NEW_BIN rev=$new
      echo "== rate $rate run $i: $side ($rev)" >&2
      load=$(cut -d' ' -f1 /proc/loadavg) b0=$(busy_s)
      json=$("$bin" bench --spawn 3 --duration "$DURATION" --warmup "$WARMUP" --rate "$rate" --json 2>/dev/null | tail -1)
      b1=$(busy_s)
      other=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%.2f" % (float(sys.argv[3])-float(sys.argv[2])-r["node_cpu_seconds"]-r["bench_cpu_seconds"]))' "$json" "$b0" "$b1")
      echo "{\"rate\":$rate,\"side\":\"$side\",\"rev\":\"$rev\",\"run\":$i,\"load1\":$load,\"other_cpu_s\":$other,\"result\":$json}" >>"$results"
    done
  done
done

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3)"
echo "results: $results"
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| rate | run | build | load1 at start | others' CPU s | submitted/s | delivered/s | p50 µs | p99 µs | CPU µs/delivered | node peak RSS MiB | dropped |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    x = r["result"]
    print(f"| {r['rate'] or 'saturated'} | {r['run']} | {r['side']} ({r['rev']}) | {r['load1']:.2f} | {r['other_cpu_s']:.1f} | {x['submit_per_sec']:,.0f} | "
          f"{x['delivered_per_sec']:,.0f} | {x['p50_us']:,} | {x['p99_us']:,} | {x['cpu_us_per_delivered']:.2f} | "
          f"{x['node_peak_rss_bytes']/2**20:.0f} | {x['dropped']} |")
PY
