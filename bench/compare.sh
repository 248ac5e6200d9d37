#!/usr/bin/env bash
# make bench-compare: fanout against its anchors on this machine: a NATS cluster (core
# publishes: the bus), a single NATS server, and NATS JetStream KV (R3 file and R1
# memory: a state store doing the same work), all on the nats-server pinned in
# tools/go.mod (built into bin/nats-server), with one pacer, one stamping rule and
# one flow control shared by every client (bench/loadkit). docs/BENCH.md ("make
# bench-compare") explains the method.
#
#   bash bench/compare.sh            # RUNS (3) interleaved runs; ~8 min per run
#   bash bench/compare.sh --quick    # smoke test: 1 run, 2 s per measurement, no quiet wait
#
# Layout, for every N: fanout = `sidecar bench --spawn N` (submit on node 0, a subscriber
# on each other node); nats-cluster = `natsbench --spawn N` (N nats-server processes with
# routes, publisher on server 0, a subscriber on each other server); nats-single = one
# nats-server with the same N-1 subscribers on it; nats-kv-r3-file and
# nats-kv-r1-memory = `natsbench --spawn 3 --kv` (a JetStream cluster, a bucket of
# history 1 with that storage and replicas, one async put per event of its own key
# through server 0, a KV watcher on each other server).
#
# Workloads (each with one event per send and with 10 per send, BATCHES):
#   saturated      --rate 0, flow-controlled end to end: at most WINDOW events sent and
#                  not yet received by every subscriber (fanout-stream and b10: also
#                  PIPELINE requests in flight), so no system is overrun; loss is its
#                  own column. saturated/b1's fanout row is one Go client call per
#                  event (sidecar bench --client publisher: the async Publisher with its
#                  defaults); fanout-stream is the SubmitStream path, one event per
#                  request (--client stream)
#   latency@RATE   LAT_RATE events/s, open loop
#   scale-N        N in SCALE_NODES nodes at SCALE_RATE events/s, SCALE_BATCH per send:
#                  CPU per delivered event and per added peer (fanout, nats-cluster)
#   memory@KEYS    MEM_KEYS (500000) keys of PAYLOAD bytes on 3 nodes (fanout:
#                  bench/fanoutmem; the KV anchors: natsbench --memory-keys), the
#                  settled VmRSS of every node before the keys and with them (a forced
#                  GC, then the scavenger, at most SETTLE_MAX), and bytes per live key
# EXTRAS=1 adds the older rows: Eureka's pacing (saturated, latency) and hot keys.
#
# Each run measures every workload, fanout first in odd runs and the anchors first in
# even ones, after waiting for a quiet machine (bench/quiet.sh; all the waits together
# at most QUIET_BUDGET seconds, 180). Every measurement is bounded (MEASURE_TIMEOUT,
# 240 s), and once BUDGET (1740 s) of wall time has passed the rest are skipped (a
# row each, ok false), so a full run ends within 30 minutes. Each measurement is one
# JSON line in bench/results/compare-<UTC time>.jsonl, with the other
# processes' CPU over it; bench/compare.py prints the summary at the end: fanout's
# ratios to each anchor within a run, bytes per live key, others' CPU per run.
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
  : "${RUNS:=1}" "${DURATION:=2s}" "${WARMUP:=500ms}" "${QUIET_BUDGET:=0}" "${DRAIN_TIMEOUT:=5s}"
  : "${SCALE_NODES:=3 5}" "${MEM_KEYS:=100000}" "${SETTLE_MAX:=10s}"
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
WORKLOADS=${WORKLOADS:-saturated latency scale memory}
MEM_KEYS=${MEM_KEYS:-500000}   # memory: live keys
SETTLE_MAX=${SETTLE_MAX:-20s}  # memory: the longest wait for the resident sets to settle
EXTRAS=${EXTRAS:-0}
KEYS=${KEYS:-1000}             # EXTRAS: task_ids of the hot-key rows
QUIET_BUDGET=${QUIET_BUDGET:-180} # seconds of waiting for a quiet machine, over all runs (QUIET_WAIT: at most per run)
MEASURE_TIMEOUT=${MEASURE_TIMEOUT:-240} # seconds: a measurement still running is stopped
BUDGET=${BUDGET:-1740}         # seconds of wall time: measurements due later are skipped (rows ok=false, skipped)
OUT=${OUT:-bench/results}

mkdir -p "$OUT" bin
stamp=$(date -u +%Y%m%dT%H%M%SZ)
results="$OUT/compare-$stamp.jsonl"
log="$OUT/compare-$stamp.log" # the benches' stderr (live lines, errors)

# shellcheck source=bench/quiet.sh
. bench/quiet.sh
started=$(date +%s) # BUDGET counts from here: the builds too

go build -o bin/sidecar ./cmd/sidecar
go build -o bin/fanoutmem ./bench/fanoutmem
(cd bench/natsbench && go build -o ../../bin/natsbench .)
go build -modfile=tools/go.mod -o bin/nats-server github.com/nats-io/nats-server/v2
natsbench=(bin/natsbench --nats-server bin/nats-server)
kv_r3=("${natsbench[@]}" --spawn 3 --kv bench --kv-storage file --replicas 3)
kv_r1=("${natsbench[@]}" --spawn 3 --kv bench --kv-storage memory --replicas 1)

# own_s VAR: sets VAR to the user+sys CPU seconds of every waited-for child of this
# shell so far (the benches and, through them, the servers they spawned). `times`
# runs in this shell (a $(...) subshell would report its own).
times_file="$OUT/.times-$stamp"
trap 'rm -f "$times_file"' EXIT
own_s() {
  times >"$times_file"
  printf -v "$1" '%s' "$(awk 'NR==2 { t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); t += a[1] * 60 + a[2] } printf "%.2f", t }' "$times_file")"
}

common=(--duration "$DURATION" --warmup "$WARMUP" --payload "$PAYLOAD" --drain-timeout "$DRAIN_TIMEOUT")
eureka=(-- --max-batching-delay=500ms --workers=20)

run=0
seq=0
# measure WORKLOAD SYSTEM COMMAND...: one measurement, one JSON line, bounded by
# MEASURE_TIMEOUT (SIGTERM: the benches stop their servers; SIGKILL 20 s later).
measure() {
  local workload=$1 system=$2; shift 2
  seq=$((seq + 1))
  echo "== run $run: $workload / $system" >&2
  echo "== run $run #$seq: $workload / $system: $*" >>"$log"
  local load busy0 busy1 own0 own1 t0 t1 json skipped=
  if [ $(($(date +%s) - started)) -ge "$BUDGET" ]; then
    echo "   skipped: the wall-time budget (BUDGET, $BUDGET s) is spent" >&2
    skipped=1
  fi
  load=$(cut -d' ' -f1 /proc/loadavg)
  busy0=$(busy_s) t0=$(date +%s.%N)
  own_s own0
  if [ -n "$skipped" ]; then
    json=null
  elif ! json=$(timeout -k 20 "$MEASURE_TIMEOUT" "$@" 2>>"$log" | tail -1) || [ -z "$json" ]; then
    echo "   FAILED (see $log)" >&2
    json=null
  fi
  own_s own1
  t1=$(date +%s.%N) busy1=$(busy_s)
  RESULT=$json SKIPPED=$skipped python3 bench/compare.py row "$run" "$seq" "$workload" "$system" "$load" \
    "$busy0" "$busy1" "$own0" "$own1" "$t0" "$t1" >>"$results"
}

# one_run: every workload once, fanout's systems first (or NATS's, when $1 = nats).
one_run() {
  local first=$1 w b n
  for w in $WORKLOADS; do
    case $w in
      saturated)
        for b in $BATCHES; do
          stream=(bin/sidecar bench --spawn 3 --json "${common[@]}" --rate 0 --batch "$b" --window "$WINDOW" --pipeline "$PIPELINE" --client stream)
          if [ "$b" = 1 ]; then # one call per event: the Go client's async Publisher, and the stream path beside it
            sys_fanout=(fanout bin/sidecar bench --spawn 3 --json "${common[@]}" --rate 0 --batch 1 --window "$WINDOW" --client publisher)
            sys_fanout2=(fanout-stream "${stream[@]}")
          else
            sys_fanout=(fanout "${stream[@]}")
            sys_fanout2=()
          fi
          nats_sat=("${common[@]}" --rate 0 --batch "$b" --window "$WINDOW" --interval 0)
          sys_nc=(nats-cluster "${natsbench[@]}" --spawn 3 "${nats_sat[@]}")
          sys_ns=(nats-single "${natsbench[@]}" --spawn 1 --subscribers 2 "${nats_sat[@]}")
          sys_kv3=(nats-kv-r3-file "${kv_r3[@]}" "${nats_sat[@]}")
          sys_kv1=(nats-kv-r1-memory "${kv_r1[@]}" "${nats_sat[@]}")
          both "saturated/b$b" "$first" "$([ "$EXTRAS" = 1 ] && echo eureka)"
        done
        ;;
      latency)
        for b in $BATCHES; do
          sys_fanout=(fanout bin/sidecar bench --spawn 3 --json "${common[@]}" --rate "$LAT_RATE" --batch "$b")
          sys_fanout2=()
          nats_lat=("${common[@]}" --rate "$LAT_RATE" --batch "$b" --interval 0)
          sys_nc=(nats-cluster "${natsbench[@]}" --spawn 3 "${nats_lat[@]}")
          sys_ns=(nats-single "${natsbench[@]}" --spawn 1 --subscribers 2 "${nats_lat[@]}")
          sys_kv3=(nats-kv-r3-file "${kv_r3[@]}" "${nats_lat[@]}")
          sys_kv1=(nats-kv-r1-memory "${kv_r1[@]}" "${nats_lat[@]}")
          both "latency@$LAT_RATE/b$b" "$first" "$([ "$EXTRAS" = 1 ] && echo eureka)"
        done
        ;;
      scale)
        for n in $SCALE_NODES; do
          sys_fanout=(fanout bin/sidecar bench --spawn "$n" --json "${common[@]}" --rate "$SCALE_RATE" --batch "$SCALE_BATCH")
          sys_fanout2=()
          sys_nc=(nats-cluster "${natsbench[@]}" --spawn "$n" "${common[@]}" --rate "$SCALE_RATE" --batch "$SCALE_BATCH" --interval 0)
          sys_ns=() sys_kv3=() sys_kv1=()
          both "scale-$n@$SCALE_RATE/b$SCALE_BATCH" "$first" ""
        done
        ;;
      memory)
        sys_fanout=(fanout bin/fanoutmem --sidecar bin/sidecar --nodes 3 --keys "$MEM_KEYS" --payload "$PAYLOAD" --settle-max "$SETTLE_MAX")
        sys_fanout2=()
        nats_mem=(--memory-keys "$MEM_KEYS" --payload "$PAYLOAD" --settle-max "$SETTLE_MAX" --drain-timeout 60s --interval 0)
        sys_nc=() sys_ns=()
        sys_kv3=(nats-kv-r3-file "${kv_r3[@]}" "${nats_mem[@]}")
        sys_kv1=(nats-kv-r1-memory "${kv_r1[@]}" "${nats_mem[@]}")
        both "memory@$MEM_KEYS" "$first" ""
        ;;
      *) echo "compare.sh: unknown workload $w (saturated, latency, scale, memory)" >&2; exit 2 ;;
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

# both WORKLOAD FIRST EXTRA: the fanout rows (and Eureka's pacing with EXTRA=eureka),
# then the anchors' rows (those of sys_nc, sys_ns, sys_kv3, sys_kv1 that are set), or
# the other way round.
both() {
  local workload=$1 first=$2 extra=$3
  fanout_rows() {
    measure "$workload" "${sys_fanout[@]}"
    if [ ${#sys_fanout2[@]} -gt 0 ]; then measure "$workload" "${sys_fanout2[@]}"; fi
    if [ "$extra" = eureka ]; then
      measure "$workload" eureka-pacing "${sys_fanout[@]:1}" "${eureka[@]}"
    fi
  }
  nats_rows() {
    local -n cmd # a nameref as the loop variable: each of the arrays in turn
    for cmd in sys_nc sys_ns sys_kv3 sys_kv1; do
      if [ ${#cmd[@]} -gt 0 ]; then measure "$workload" "${cmd[@]}"; fi
    done
  }
  if [ "$first" = nats ]; then nats_rows; fanout_rows; else fanout_rows; nats_rows; fi
}

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(go version | cut -d' ' -f3), $(bin/nats-server --version)" | tee -a "$log" >&2
echo "results: $results (stderr of the benches: $log)" >&2
quiet_left=$QUIET_BUDGET
run_wait=${QUIET_WAIT:-$QUIET_BUDGET} # one run's wait, if QUIET_WAIT is given
for run in $(seq "$RUNS"); do
  # The quiet waits share one budget, so that a busy machine cannot stretch the bench
  # past RUNS x (a run) + QUIET_BUDGET.
  w0=$(date +%s)
  QUIET_WAIT=$((quiet_left < run_wait ? quiet_left : run_wait)) wait_quiet
  quiet_left=$((quiet_left - ($(date +%s) - w0)))
  if [ "$quiet_left" -lt 0 ]; then quiet_left=0; fi
  if [ $((run % 2)) = 1 ]; then one_run fanout; else one_run nats; fi
done

python3 bench/compare.py summary "$results"
echo "quiet waits: $((QUIET_BUDGET - quiet_left)) s of the $QUIET_BUDGET s budget; wall time: $(($(date +%s) - started)) s ($RUNS run(s))"
