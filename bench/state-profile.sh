#!/usr/bin/env bash
# Issue 9: the GC share of a receiving node's CPU at saturation, before (OLD_BIN, the
# version table + inbox) and after (NEW_BIN, the state table). Build both first, e.g.
# with bench/state-ab.sh (it leaves /tmp/old-sidecar and /tmp/new-sidecar).
# For each of RUNS interleaved pairs: start three `serve` nodes of the binary on free
# loopback ports with admin listeners, run `bench --app-addrs` at --rate 0 against
# them (publisher on node 0, subscribers on 1 and 2), and take a PROFILE_SECONDS CPU
# profile, from PROFILE_AT seconds into the run, of node 1 (a receiver: Replicate in,
# Subscribe out) and at the same time of node 0 (the origin: the node that saturates)
# from their /debug/pprof/profile. Keeps each profile and its `pprof -top` in $OUT and
# prints one JSON line per pair of profiles: the percent of all samples whose stack
# holds
#   gc_mark  runtime.gcBgMarkWorker (the background mark workers)
#   assist   runtime.gcAssistAlloc (mark work charged to allocating goroutines,
#            called from mallocgc)
#   gc       either of the two (what "GC share" means in docs/BENCHMARKS.md)
# and, for context, runtime.bgsweep, runtime.mallocgc (allocation, assist included),
# and the version table + inbox (old) or pkg/state (new); each by pprof -focus. The
# origin_* fields are the same for node 0.
#   OLD_BIN, NEW_BIN, RUNS (3), DURATION (12s), PROFILE_AT (2), PROFILE_SECONDS (8)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/quiet.sh
OLD_BIN=${OLD_BIN:-/tmp/old-sidecar} NEW_BIN=${NEW_BIN:-/tmp/new-sidecar}
RUNS=${RUNS:-3} DURATION=${DURATION:-12s} PROFILE_AT=${PROFILE_AT:-2} PROFILE_SECONDS=${PROFILE_SECONDS:-8}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
results="$OUT/state-profile-$stamp.jsonl"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap stop EXIT

profile_run() { # side bin run
  local side=$1 bin=$2 run=$3 apps=() admins=() peers=() profs=() i
  for i in 0 1 2; do apps+=("127.0.0.1:$(free_port)") admins+=("127.0.0.1:$(free_port)") peers+=("127.0.0.1:$(free_port)"); done
  # Profiles: on --pprof-addr since it exists (issue 11), on the admin address before.
  local has_pprof=0
  "$bin" serve --help 2>&1 | grep -q -- '--pprof-addr' && has_pprof=1
  for i in 0 1 2; do if [ $has_pprof = 1 ]; then profs+=("127.0.0.1:$(free_port)"); else profs+=("${admins[$i]}"); fi; done
  local all; all=$(IFS=,; echo "${peers[*]}")
  for i in 0 1 2; do
    local extra=()
    [ $has_pprof = 1 ] && extra=(--pprof-addr "${profs[$i]}")
    "$bin" serve --node-id "prof-$i" --app-addr "${apps[$i]}" --peer-addr "${peers[$i]}" --admin-addr "${admins[$i]}" \
      "${extra[@]}" --peers "$all" --log-level warn 2>/dev/null &
    pids+=($!)
  done
  for i in 0 1 2; do
    for _ in $(seq 100); do curl -sf "http://${admins[$i]}/healthz" >/dev/null && break; sleep 0.1; done
  done
  local prof="$OUT/state-profile-$stamp-$side-$run.pb.gz" origin="$OUT/state-profile-$stamp-$side-$run-origin.pb.gz" json
  (sleep "$PROFILE_AT"; curl -sf -o "$prof" "http://${profs[1]}/debug/pprof/profile?seconds=$PROFILE_SECONDS") &
  local curlpid=$!
  (sleep "$PROFILE_AT"; curl -sf -o "$origin" "http://${profs[0]}/debug/pprof/profile?seconds=$PROFILE_SECONDS") &
  local curlpid0=$!
  json=$("$bin" bench --app-addrs "$(IFS=,; echo "${apps[*]}")" --rate 0 --duration "$DURATION" --warmup 1s --json 2>/dev/null | tail -1)
  wait "$curlpid" "$curlpid0"
  stop
  go tool pprof -top -nodecount=100000 "$prof" 2>/dev/null >"${prof%.pb.gz}.top.txt"
  go tool pprof -top -nodecount=100000 "$origin" 2>/dev/null >"${origin%.pb.gz}.top.txt"
  python3 - "$side" "$run" "$(cut -d' ' -f1 /proc/loadavg)" "$json" "$prof" "$origin" <<'PY'
import json, re, subprocess, sys
side, run, load, bench, prof, origin = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5], sys.argv[6]
def share(focus, prof=prof):
    """Percent of all samples with a frame matching focus in their stack (no double counting)."""
    out = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=100000", "-focus=" + focus, prof],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"Showing nodes accounting for [^,]+, ([\d.]+)% of ([\d.]+)(ms|s) total", out)
    return (float(m.group(1)) if m else 0.0), (float(m.group(2)) / (1000 if m and m.group(3) == "ms" else 1) if m else 0.0)
gc_mark, total = share(r"^runtime\.gcBgMarkWorker$")
out = {"side": side, "run": run, "load1_after": load, "profile_cpu_s": total,
       "gc_mark": gc_mark, "assist": share(r"^runtime\.gcAssistAlloc$")[0],
       "gc": share(r"^runtime\.(gcBgMarkWorker|gcAssistAlloc)$")[0],
       "bgsweep": share(r"^runtime\.bgsweep$")[0], "mallocgc": share(r"^runtime\.mallocgc$")[0],
       # the node's table(s): the version table and the inbox (old), the state table (new)
       "table": share(r"fanout\.\(\*(versionTable|versionShard|inbox)\)\.|pkg/state\.")[0],
       "profile": prof, "delivered_per_sec": round(bench.get("delivered_per_sec", 0))}
o_gc, o_total = share(r"^runtime\.(gcBgMarkWorker|gcAssistAlloc)$", origin)
out.update({"origin_cpu_s": o_total, "origin_gc": o_gc, "origin_mallocgc": share(r"^runtime\.mallocgc$", origin)[0],
            "origin_table": share(r"fanout\.\(\*(versionTable|versionShard|inbox)\)\.|pkg/state\.", origin)[0]})
print(json.dumps(out))
PY
}

for run in $(seq "$RUNS"); do
  wait_quiet
  for side in old new; do
    bin=$OLD_BIN
    [ "$side" = new ] && bin=$NEW_BIN
    echo "== profile run $run: $side" >&2
    profile_run "$side" "$bin" "$run" | tee -a "$results"
  done
done
echo "results: $results"
