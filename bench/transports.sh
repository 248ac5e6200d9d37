#!/usr/bin/env bash
# make bench-transports: the two transports of fanout on this machine, the mesh and
# --transport=jetstream on a 3-server NATS JetStream cluster (the nats-server pinned in
# tools/go.mod), with `sidecar bench`, and the JetStream transport's saturated
# throughput against a plain NATS KV client doing the same work (the anchor).
#
#   bash bench/transports.sh           # RUNS (3) interleaved runs, ~20 min
#   bash bench/transports.sh --quick   # smoke test: 1 run, N = 3, 2 s per measurement
#
# Matrix, in this order: for each run, for each N in NODES (3 5 9 17), both transports
# and the anchor (mesh, jetstream, nats-kv in odd runs; the other way round in even
# ones): `sidecar bench --spawn N` at RATE (500) events/s, BATCH (1) per Submit, one
# publisher on node 0 and a subscriber on every other node; nats-kv is `natsbench
# --kv --watchers N-1`, the same puts and N-1 KV watchers on the NATS servers. The JetStream rows get a fresh NATS cluster each
# (`natsbench --hold`), whose servers' CPU, peak RSS and TCP connections `sidecar
# bench --engine-pid` reads over the same window as the sidecars': the servers are the
# engine, so their CPU is part of the cluster's. Then the anchor at SAT_N (3) sidecars
# and servers: `sidecar bench --rate 0 --window WINDOW` on the JetStream transport
# against `natsbench --kv` (puts of unique keys into an R3 file bucket, acknowledged
# asynchronously, a KV watcher on each other server), in alternating order.
#
# Each measurement is one JSON line in bench/results/transports-<UTC time>.jsonl,
# with the machine's busy CPU and the CPU of everything this script ran (the shell's
# children, from `times`) over the measurement, so the other processes' share is a
# column ("others", in cores): a run with others above NOISY cores is marked and can
# be run again. bench/transports.py prints the tables, the slopes and the crossover.
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=${QUICK:-0}
for arg in "$@"; do
  case $arg in
    --quick) QUICK=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "transports.sh: unknown argument $arg (--quick, or environment variables)" >&2; exit 2 ;;
  esac
done
if [ "$QUICK" = 1 ]; then
  : "${RUNS:=1}" "${NODES:=3}" "${DURATION:=2s}" "${WARMUP:=500ms}" "${SAT_DURATION:=2s}" "${QUIET_WAIT:=0}"
fi
RUNS=${RUNS:-3}
NODES=${NODES:-3 5 9 17}
RATE=${RATE:-500}              # events/s of the fixed-rate rows
BATCH=${BATCH:-1}              # events per Submit at RATE
DURATION=${DURATION:-10s}      # measured time per measurement
WARMUP=${WARMUP:-1s}
PAYLOAD=${PAYLOAD:-100}
SAT_N=${SAT_N:-3}              # the anchor: sidecars and NATS servers
SAT_DURATION=${SAT_DURATION:-10s}
SAT_BATCH=${SAT_BATCH:-10}     # events per Submit, and per send of the KV client
WINDOW=${WINDOW:-5000}         # saturated: events outstanding end to end
PIPELINE=${PIPELINE:-256}      # saturated sidecar: SubmitRequests in flight
NATS_SERVERS=${NATS_SERVERS:-3}
NOISY=${NOISY:-0.5}            # others' cores above which a measurement is marked noisy
QUIET_WAIT=${QUIET_WAIT:-120}  # bench/quiet.sh: wait at most this long for load < QUIET_LOAD
OUT=${OUT:-bench/results}
export QUIET_WAIT NOISY

mkdir -p "$OUT" bin
stamp=$(date -u +%Y%m%dT%H%M%SZ)
results="$OUT/transports-$stamp.jsonl"
log="$OUT/transports-$stamp.log" # the benches' stderr
# shellcheck source=bench/quiet.sh
. bench/quiet.sh

go build -o bin/sidecar ./cmd/sidecar
(cd bench/natsbench && go build -o ../../bin/natsbench .)
go build -modfile=tools/go.mod -o bin/nats-server github.com/nats-io/nats-server/v2

# own_s VAR: sets VAR to the user+sys CPU seconds of every waited-for child of this
# shell so far. `times` runs in this shell (a $(...) subshell would report its own).
times_file="$OUT/.times-$stamp"
own_s() {
  times >"$times_file"
  printf -v "$1" '%s' "$(awk 'NR==2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%.2f", t }' "$times_file")"
}

hold_pid=
stop_hold() {
  if [ -n "$hold_pid" ]; then
    kill "$hold_pid" 2>/dev/null || true
    wait "$hold_pid" 2>/dev/null || true
    hold_pid=
  fi
}
trap 'stop_hold; rm -f "$times_file"' EXIT

# start_nats: a fresh JetStream cluster of NATS_SERVERS; sets nats_urls and nats_pids.
start_nats() {
  local info="$OUT/.hold-$stamp.json"
  : >"$info"
  bin/natsbench --spawn "$NATS_SERVERS" --nats-server bin/nats-server --hold >"$info" 2>>"$log" &
  hold_pid=$!
  for _ in $(seq 300); do
    [ -s "$info" ] && break
    kill -0 "$hold_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s "$info" ]; then
    echo "   the NATS cluster did not start (see $log)" >&2
    stop_hold
    return 1
  fi
  nats_urls=$(python3 -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))["urls"]))' "$info")
  nats_pids=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["pids"])))' "$info")
  rm -f "$info"
}

run=0
# measure WORKLOAD N SYSTEM COMMAND...: one measurement, one JSON line. SYSTEM jetstream
# starts a NATS cluster first and appends its URLs and process ids to the command.
measure() {
  local workload=$1 n=$2 system=$3; shift 3
  local cmd=("$@") load busy0 busy1 own0 own1 t0 t1 json
  echo "== run $run: $workload N=$n $system" >&2
  load=$(cut -d' ' -f1 /proc/loadavg)
  busy0=$(busy_s) t0=$(date +%s.%N)
  own_s own0
  json=null
  if [ "$system" != jetstream ] || start_nats; then
    if [ "$system" = jetstream ]; then
      cmd+=(--engine-pid "$nats_pids" -- --transport=jetstream --nats-url="$nats_urls")
    fi
    echo "== run $run: $workload N=$n $system: ${cmd[*]}" >>"$log"
    if ! json=$("${cmd[@]}" 2>>"$log" | tail -1) || [ -z "$json" ]; then
      echo "   FAILED (see $log)" >&2
      json=null
    fi
  fi
  stop_hold
  own_s own1
  t1=$(date +%s.%N) busy1=$(busy_s)
  RESULT=$json python3 bench/transports.py row "$run" "$workload" "$n" "$system" "$load" \
    "$busy0" "$busy1" "$own0" "$own1" "$t0" "$t1" >>"$results"
}

common=(--json --duration "$DURATION" --warmup "$WARMUP" --payload "$PAYLOAD")
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3), $(bin/nats-server --version)" | tee -a "$log" >&2
echo "results: $results (stderr of the benches: $log)" >&2
for run in $(seq "$RUNS"); do
  wait_quiet
  order=(mesh jetstream nats-kv)
  if [ $((run % 2)) = 0 ]; then order=(nats-kv jetstream mesh); fi
  for n in $NODES; do
    for t in "${order[@]}"; do
      if [ "$t" = nats-kv ]; then
        measure "rate$RATE" "$n" nats-kv bin/natsbench --spawn "$NATS_SERVERS" --nats-server bin/nats-server --kv fanout \
          --watchers $((n - 1)) --duration "$DURATION" --warmup "$WARMUP" --payload "$PAYLOAD" --rate "$RATE" --batch "$BATCH" --interval 0
      else
        measure "rate$RATE" "$n" "$t" bin/sidecar bench --spawn "$n" "${common[@]}" --rate "$RATE" --batch "$BATCH"
      fi
    done
  done
  sat=(jetstream nats-kv)
  if [ $((run % 2)) = 0 ]; then sat=(nats-kv jetstream); fi
  for t in "${sat[@]}"; do
    if [ "$t" = jetstream ]; then
      measure saturated "$SAT_N" jetstream bin/sidecar bench --spawn "$SAT_N" --json --duration "$SAT_DURATION" --warmup "$WARMUP" \
        --payload "$PAYLOAD" --rate 0 --batch "$SAT_BATCH" --window "$WINDOW" --pipeline "$PIPELINE"
    else
      measure saturated "$SAT_N" nats-kv bin/natsbench --spawn "$SAT_N" --nats-server bin/nats-server --kv fanout \
        --duration "$SAT_DURATION" --warmup "$WARMUP" --payload "$PAYLOAD" --rate 0 --batch "$SAT_BATCH" --window "$WINDOW" --interval 0
    fi
  done
done

python3 bench/transports.py summary "$results"
