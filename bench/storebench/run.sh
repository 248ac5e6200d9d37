#!/usr/bin/env bash
# Issue 10: which embedded store keeps --data-dir. Builds storebench, times this disk's
# fsync once, then runs RUNS rounds of STORES, interleaved (pebble, bbolt, bbolt-batch,
# pebble, ...), each store in its own process on a fresh directory under DATA, each run
# after waiting for a quiet machine (bench/quiet.sh; here at most QUIET_WAIT=180 s, then
# it measures anyway and the table says at what load). Every run's JSON line goes to
# $OUT/storebench-<time>.jsonl with the load average it started at; the markdown tables
# of docs/BENCHMARKS.md are printed at the end.
#   RUNS (3), STORES ("pebble bbolt bbolt-batch"), DURATION (4s: each write phase),
#   DATA (/tmp), OUT (bench/results), BIN (/tmp/storebench)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
QUIET_WAIT=${QUIET_WAIT:-180}
. bench/quiet.sh
RUNS=${RUNS:-3} STORES=${STORES:-pebble bbolt bbolt-batch} DURATION=${DURATION:-4s}
DATA=${DATA:-/tmp} OUT=${OUT:-bench/results} BIN=${BIN:-/tmp/storebench}
mkdir -p "$OUT"
results="$OUT/storebench-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
(cd "$here" && go build -o "$BIN" .)

one() { # store run: one process on a fresh directory, one JSON line
  local dir="$DATA/storebench-$1-$$" load json
  rm -rf "$dir"
  wait_quiet
  load=$(cut -d' ' -f1 /proc/loadavg)
  echo "== $1 run $2 (load $load)" >&2
  json=$("$BIN" -store "$1" -dir "$dir" -duration "$DURATION" 2>>"$results.log")
  rm -rf "$dir"
  echo "{\"run\":$2,\"load1\":$load,\"utc\":\"$(date -u +%H:%M)\",\"result\":$json}" >>"$results"
}

one fsync 1
for i in $(seq "$RUNS"); do
  for s in $STORES; do one "$s" "$i"; done
done

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3), $(df -T "$DATA" | awk 'NR==2{print $2}') on $(df "$DATA" | awk 'NR==2{print $1}')"
echo "results: $results"
python3 "$here/tables.py" "$results"
