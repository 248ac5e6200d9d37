#!/usr/bin/env bash
# An A/B of two revisions' builds with the same flags: whether a change (a refactor)
# slowed the product down. Each revision is built once from its tree (git archive)
# into $BUILDS/<commit> (kept: a second A/B against the same baseline reuses it): its
# sidecar, and the test binary of the package that holds BenchmarkPipeline at that
# revision (wherever it moved). Then, on a shared machine, interleaved pairs only:
#   1. bench/ab.sh runs `sidecar bench --spawn 3` of A's and B's builds, RUNS (here 5)
#      pairs per workload (its settings apply: DURATION, WARMUP...);
#   2. PIPELINE_RUNS pairs of BenchmarkPipeline, each pair after a quiet machine
#      (bench/quiet.sh), A first in odd pairs, B first in even ones: events/s, and the
#      test process's CPU per event (a fixed PIPELINE_EVENTS per run: -benchtime Nx,
#      so the CPU is that of N events, of the benchmark's one-event probe and of two
#      node pairs' start and stop), with the CPU others used meanwhile;
#   3. bench/ratios.py prints B / A pair by pair and its range and geometric mean per
#      workload, over all pairs and over the clean ones.
# Every run's JSON line goes to one file, $OUT/NAME-<time>.jsonl.
#
#   bench/rev-ab.sh NAME REV_A REV_B
#
# WORKLOADS: the sidecar bench workloads (default: saturated with one event per Submit,
#   flow-controlled end to end so that nothing is dropped, and 10,000 events/s with one
#   event per Submit: per-Submit work is where a change to the node's path shows most);
#   WORKLOADS="" runs BenchmarkPipeline only.
# PIPELINE_BENCH ('BenchmarkPipeline/proto=stream/workers=8$'), PIPELINE_RUNS ($RUNS),
#   PIPELINE_EVENTS (500000, ~1.3 s on a quiet machine); PIPELINE_RUNS=0 skips it.
# BUILDS (/tmp/rev-ab), QUIET_WAIT (here 30 s: a pair waits at most that long, so that
#   the A/B takes ~11 minutes on a busy machine; interleaving keeps its ratios fair).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${QUIET_WAIT:=30}"
. bench/quiet.sh
[ $# -eq 3 ] || { echo "usage: bench/rev-ab.sh NAME REV_A REV_B" >&2; exit 2; }
name=$1
RUNS=${RUNS:-5}
: "${WORKLOADS=--rate 0 --batch 1 --window 5000 --pipeline 256;--rate 10000 --batch 1}"
PIPELINE_BENCH=${PIPELINE_BENCH:-'BenchmarkPipeline/proto=stream/workers=8$'}
PIPELINE_RUNS=${PIPELINE_RUNS:-$RUNS} PIPELINE_EVENTS=${PIPELINE_EVENTS:-500000}
BUILDS=${BUILDS:-/tmp/rev-ab} OUT=${OUT:-bench/results}
export RUNS WORKLOADS QUIET_WAIT OUT
mkdir -p "$OUT"
RESULTS="$OUT/$name-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
export RESULTS

build() { # rev -> $BUILDS/<rev>, holding sidecar and pipeline.test
  local rev=$1 dir=$BUILDS/$1 src pkg
  if [ -x "$dir/sidecar" ] && [ -x "$dir/pipeline.test" ]; then echo "$dir"; return; fi
  mkdir -p "$dir"
  pkg=$(git grep -l '^func BenchmarkPipeline(' "$rev" -- '*_test.go' | head -1)
  pkg=${pkg#"$rev":}
  [ -n "$pkg" ] || { echo "rev-ab: no BenchmarkPipeline at $rev" >&2; exit 1; }
  echo "rev-ab: building $rev (BenchmarkPipeline in $(dirname "$pkg"))" >&2
  src=$(mktemp -d /tmp/rev-ab-src-XXXXXX)
  git archive "$rev" | tar -x -C "$src"
  go build -C "$src" -o "$dir/sidecar" ./cmd/sidecar >&2
  go test -C "$src" -c -o "$dir/pipeline.test" "./$(dirname "$pkg")" >&2
  rm -rf "$src"
  echo "$dir"
}
# The sides are named A:<rev> and B:<rev>, so that A and B may be one revision (the
# noise band of the method: an A/A).
a=$(git rev-parse --short "$2^{commit}") b=$(git rev-parse --short "$3^{commit}")
start=$(date +%s)
a_dir=$(build "$a") b_dir=$(build "$b")
echo "rev-ab: built in $(($(date +%s) - start)) s" >&2

if [ -n "$WORKLOADS" ]; then
  A_BIN=$a_dir/sidecar B_BIN=$b_dir/sidecar A_REV=$a B_REV=$b bash bench/ab.sh "$name" "A:$a" "" "B:$b" ""
fi

# BenchmarkPipeline, interleaved. Others' CPU: the machine's busy CPU during the run
# minus the test process's own (user + system, by /usr/bin/time).
declare -A side_dir=([A]=$a_dir [B]=$b_dir) side_rev=([A]=$a [B]=$b)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq "$PIPELINE_RUNS"); do
  wait_quiet
  order=(A B)
  if [ $((i % 2)) -eq 0 ]; then order=(B A); fi
  for side in "${order[@]}"; do
    echo "== BenchmarkPipeline run $i: $side:${side_rev[$side]}" >&2
    load=$(cut -d' ' -f1 /proc/loadavg) b0=$(busy_s) t0=$(date +%s.%N)
    (cd "$tmp" && /usr/bin/time -f '%U %S' -o "$tmp/cpu" "${side_dir[$side]}/pipeline.test" -test.run '^$' \
      -test.bench "$PIPELINE_BENCH" -test.benchtime "${PIPELINE_EVENTS}x" -test.benchmem >"$tmp/out" 2>&1) ||
      { cat "$tmp/out" >&2; exit 1; }
    b1=$(busy_s) t1=$(date +%s.%N)
    python3 - "$tmp/out" "$tmp/cpu" "$side" "${side_rev[$side]}" "$i" "$load" "$b0" "$b1" "$t0" "$t1" >>"$RESULTS" <<'PY'
import json, sys
out, cpu, side, rev, run, load, b0, b1, t0, t1 = sys.argv[1:]
lines = [l.split() for l in open(out) if l.startswith("Benchmark")]
if len(lines) != 1:
    sys.exit("rev-ab: expected one benchmark line, got:\n" + open(out).read())
f = lines[0]
units = {u: float(v) for v, u in zip(f[2::2], f[3::2])}
proc = sum(float(x) for x in open(cpu).read().split()[-2:])
wall = float(t1) - float(t0)
print(json.dumps({"workload": f[0].rsplit("-", 1)[0], "side": side + ":" + rev, "rev": rev, "run": int(run), "load1": float(load),
    "other_cpu_s": round(float(b1) - float(b0) - proc, 2),
    "result": {"events_per_sec": units["events/s"], "ns_per_op": units["ns/op"], "bytes_per_op": units.get("B/op"),
               "allocs_per_op": units.get("allocs/op"), "n": int(f[1]), "cpu_s": proc, "wall_s": round(wall, 2)}}))
PY
    tail -1 "$RESULTS" >&2
  done
done

echo
echo "results: $RESULTS ($(($(date +%s) - start)) s in all)"
python3 bench/ratios.py "$RESULTS" "A:$a" "B:$b"
