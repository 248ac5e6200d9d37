#!/usr/bin/env bash
# CPU profiles of a running mesh under one workload: three `serve` nodes of BIN on free
# loopback ports (with --pprof-addr), `BIN bench --app-addrs` against them with the
# given bench arguments, and PROFILE_SECONDS of CPU profile from PROFILE_AT seconds in,
# at once, of node 0 (the origin), node 1 (a receiver) and the bench client. Keeps
# the three profiles in $OUT and prints, for each, the CPU seconds sampled and the
# top functions by cumulative share. It is how the "why" of a missed target in
# docs/BENCHMARKS.md is found.
#
# With TRACE_SECONDS set, it also takes an execution trace of that many seconds from the
# origin and the receiver, right after the CPU profiles, and prints where their
# goroutines waited: `go tool trace -pprof=sched` (runnable, not running: waiting for the
# one P) and `-pprof=syscall` (in a system call), by stack. That is the "why" of a
# latency, where the CPU profile is the "why" of a cost.
#
#   bench/profile.sh [bench args...]     e.g. bench/profile.sh --rate 0 --batch 10
#   BIN (built from HEAD into /tmp/profile-sidecar), SERVE_FLAGS, DURATION (12s),
#   PROFILE_AT (3), PROFILE_SECONDS (6), TRACE_SECONDS (unset: no trace),
#   OUT (/tmp/fanout-profiles), NODES (3: node 0 the origin, every other one a receiver)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-/tmp/profile-sidecar}
DURATION=${DURATION:-12s} PROFILE_AT=${PROFILE_AT:-3} PROFILE_SECONDS=${PROFILE_SECONDS:-6}
OUT=${OUT:-/tmp/fanout-profiles}
NODES=${NODES:-3}
read -ra serve_flags <<<"${SERVE_FLAGS:-}"
mkdir -p "$OUT"
[ "$BIN" = /tmp/profile-sidecar ] && go build -o "$BIN" ./cmd/sidecar
stamp=$(date -u +%Y%m%dT%H%M%SZ)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap stop EXIT
apps=() admins=() peers=() profs=()
for i in $(seq 0 $((NODES - 1))); do
  apps+=("127.0.0.1:$(free_port)") admins+=("127.0.0.1:$(free_port)") peers+=("127.0.0.1:$(free_port)") profs+=("127.0.0.1:$(free_port)")
done
all=$(IFS=,; echo "${peers[*]}")
for i in $(seq 0 $((NODES - 1))); do
  "$BIN" serve --node-id "prof-$i" --app-addr "${apps[$i]}" --peer-addr "${peers[$i]}" --admin-addr "${admins[$i]}" \
    --pprof-addr "${profs[$i]}" --peers "$all" --log-level warn "${serve_flags[@]}" 2>/dev/null &
  pids+=($!)
done
for i in $(seq 0 $((NODES - 1))); do
  for _ in $(seq 100); do curl -sf "http://${admins[$i]}/healthz" >/dev/null && break; sleep 0.1; done
done
origin="$OUT/$stamp-origin.pb.gz" recv="$OUT/$stamp-receiver.pb.gz" client="$OUT/$stamp-client.pb.gz"
(sleep "$PROFILE_AT"; curl -sf -o "$origin" "http://${profs[0]}/debug/pprof/profile?seconds=$PROFILE_SECONDS") &
c0=$!
(sleep "$PROFILE_AT"; curl -sf -o "$recv" "http://${profs[1]}/debug/pprof/profile?seconds=$PROFILE_SECONDS") &
c1=$!
traces=() tpids=()
if [ -n "${TRACE_SECONDS:-}" ]; then
  traces=("$OUT/$stamp-origin.trace" "$OUT/$stamp-receiver.trace")
  for i in 0 1; do
    (sleep $((PROFILE_AT + PROFILE_SECONDS)); curl -sf -o "${traces[$i]}" "http://${profs[$i]}/debug/pprof/trace?seconds=$TRACE_SECONDS") &
    tpids+=($!)
  done
fi
"$BIN" bench --app-addrs "$(IFS=,; echo "${apps[*]}")" --duration "$DURATION" --warmup 1s --cpuprofile "$client" "$@" --json 2>/dev/null | tail -1
wait "$c0" "$c1"
for p in "${tpids[@]}"; do wait "$p"; done
stop
for p in "$origin" "$recv" "$client"; do
  echo "== $p"
  go tool pprof -top -cum -nodecount=45 "$p" 2>/dev/null | sed -n '4,50p'
done
for t in "${traces[@]}"; do
  for kind in sched syscall; do
    echo "== $t: $kind"
    go tool trace -pprof="$kind" "$t" >"$t.$kind.pb" 2>/dev/null && go tool pprof -top -nodecount=25 "$t.$kind.pb" 2>/dev/null | sed -n '4,32p'
  done
done
