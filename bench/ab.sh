#!/usr/bin/env bash
# An A/B of two sets of serve flags on one build: `sidecar bench --spawn 3`, RUNS
# interleaved pairs per workload, each pair after a quiet machine (bench/quiet.sh),
# A first in odd runs and B first in even ones (the second of a pair starts on a
# machine the first has just warmed, with a higher load average);
# every run's JSON line goes to $OUT/<name>-<time>.jsonl, and a markdown table is
# printed. bench/mtls-ab.sh and bench/stream-ab.sh call it.
#
#   bench/ab.sh NAME A_SIDE "A serve flags" B_SIDE "B serve flags"
#
# A_BIN and B_BIN, with A_REV and B_REV, give a side a sidecar built elsewhere (from
# another revision: bench/rev-ab.sh); by default both run $BIN.
#
# Serve flags are given as sidecar bench's --serve-flag=... words, split on spaces.
#   BIN (/tmp/ab-sidecar, built from HEAD), RUNS (3), DURATION (6s), WARMUP (1s),
#   WORKLOADS (";"-separated sidecar bench arguments, one workload each:
#   "--rate 0;--rate 10000"), OUT (bench/results), RESULTS (the file, instead of the
#   named one under $OUT: bench/rev-ab.sh appends its own runs to it)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/quiet.sh
[ $# -eq 5 ] || { echo "usage: bench/ab.sh NAME A_SIDE 'A flags' B_SIDE 'B flags'" >&2; exit 2; }
name=$1
sides=("$2" "$4")
declare -A side_flags=(["$2"]=$3 ["$4"]=$5)
BIN=${BIN:-/tmp/ab-sidecar}
declare -A side_bin=(["$2"]=${A_BIN:-$BIN} ["$4"]=${B_BIN:-$BIN})
RUNS=${RUNS:-3} DURATION=${DURATION:-6s} WARMUP=${WARMUP:-1s} WORKLOADS=${WORKLOADS:---rate 0;--rate 10000}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
results=${RESULTS:-$OUT/$name-$(date -u +%Y%m%dT%H%M%SZ).jsonl}
if [ -z "${A_BIN:-}" ] || [ -z "${B_BIN:-}" ]; then go build -o "$BIN" ./cmd/sidecar; fi
head_rev=$(git rev-parse --short HEAD)
declare -A side_rev=(["$2"]=${A_REV:-$head_rev} ["$4"]=${B_REV:-$head_rev})

IFS=';' read -ra workloads <<<"$WORKLOADS"
for w in "${workloads[@]}"; do
  read -ra wargs <<<"$w"
  for i in $(seq "$RUNS"); do
    wait_quiet
    order=("${sides[@]}")
    if [ $((i % 2)) -eq 0 ]; then order=("${sides[1]}" "${sides[0]}"); fi
    for side in "${order[@]}"; do
      read -ra flags <<<"${side_flags[$side]}"
      echo "== $w run $i: $side" >&2
      load=$(cut -d' ' -f1 /proc/loadavg) b0=$(busy_s)
      json=$("${side_bin[$side]}" bench --spawn 3 --duration "$DURATION" --warmup "$WARMUP" "${wargs[@]}" "${flags[@]}" --json 2>/dev/null | tail -1)
      b1=$(busy_s)
      other=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%.2f" % (float(sys.argv[3])-float(sys.argv[2])-r["node_cpu_seconds"]-r["bench_cpu_seconds"]))' "$json" "$b0" "$b1")
      echo "{\"workload\":\"$w\",\"side\":\"$side\",\"rev\":\"${side_rev[$side]}\",\"run\":$i,\"load1\":$load,\"other_cpu_s\":$other,\"result\":$json}" >>"$results"
    done
  done
done

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3)"
echo "results: $results"
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| workload | run | side | load1 at start | others' CPU s | submitted/s | delivered/s | p50 µs | p99 µs | CPU µs/delivered | node peak RSS MiB | dropped |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    x = r["result"]
    print(f"| {r['workload']} | {r['run']} | {r['side']} | {r['load1']:.2f} | {r['other_cpu_s']:.1f} | {x['submit_per_sec']:,.0f} | "
          f"{x['delivered_per_sec']:,.0f} | {x['p50_us']:,} | {x['p99_us']:,} | {x['cpu_us_per_delivered']:.2f} | "
          f"{x['node_peak_rss_bytes']/2**20:.0f} | {x['dropped']} |")
PY
