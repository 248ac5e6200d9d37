#!/usr/bin/env bash
# The state table's memory on a real process (issue 9: 1M keys, target <= 256 MiB RSS).
# Starts one `sidecar serve` (no peers, admin on loopback, free ports), writes KEYS
# distinct 24-byte task_ids with PAYLOAD-byte payloads through Submit batches of 1000
# (bench/stateload), waits until GetStatus shows every key, then reads VmRSS:
#   rss_loaded   right after the load (and VmHWM, the peak)
#   rss_gc       after a forced GC (/debug/pprof/heap?gc=1, whose profile is kept)
#   rss_10s      10 s later (the scavenger returns freed pages over time)
# and prints one JSON line with the Go heap and the table's gauges from /metrics (also
# appended to $OUT/state-memory.jsonl).
# The node inherits the environment: GOGC=50 or GOMEMLIMIT=200MiB bash bench/state-memory.sh.
#   KEYS (1000000), PAYLOAD (100), OUT (bench/results: the heap profile goes there)
set -euo pipefail
cd "$(dirname "$0")/.."
KEYS=${KEYS:-1000000}
PAYLOAD=${PAYLOAD:-100}
OUT=${OUT:-bench/results}
mkdir -p bin "$OUT"
go build -o bin/sidecar ./cmd/sidecar
go build -o bin/stateload ./bench/stateload

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
kib() { awk -v k="$2:" '$1==k {print $2}' "/proc/$1/status"; }
mib() { echo $(( $(kib "$1" "$2") / 1024 )); }
metric() { awk -v m="$1" '$1==m {printf "%d", $2}' "$metrics"; }

app=127.0.0.1:$(free_port) admin=127.0.0.1:$(free_port) pprof=127.0.0.1:$(free_port)
metrics=$(mktemp)
log=$(mktemp)
bin/sidecar serve --node-id mem --app-addr "$app" --peer-addr "127.0.0.1:$(free_port)" \
  --admin-addr "$admin" --pprof-addr "$pprof" --log-level warn 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$metrics" "$log"' EXIT
for _ in $(seq 100); do curl -sf "http://$admin/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://$admin/healthz" >/dev/null || { echo "node did not start:" >&2; cat "$log" >&2; exit 1; }

load=$(bin/stateload --addr "$app" --keys "$KEYS" --payload "$PAYLOAD" --batch 1000)
rss_loaded=$(mib "$pid" VmRSS) hwm=$(mib "$pid" VmHWM)
stamp=$(date -u +%Y%m%dT%H%M%SZ)
heap="$OUT/state-memory-$stamp.heap.pb.gz"
curl -sf -o "$heap" "http://$pprof/debug/pprof/heap?gc=1"
rss_gc=$(mib "$pid" VmRSS)
curl -sf -o "$metrics" "http://$admin/metrics"
sleep 10
rss_10s=$(mib "$pid" VmRSS) hwm=$(mib "$pid" VmHWM)

{
printf '{"when":"%s","gogc":"%s","gomemlimit":"%s","load":%s,"rss_loaded_mib":%d,"rss_gc_mib":%d,"rss_10s_mib":%d,"hwm_mib":%d,' \
  "$stamp" "${GOGC:-}" "${GOMEMLIMIT:-}" "$load" "$rss_loaded" "$rss_gc" "$rss_10s" "$hwm"
printf '"heap_alloc_mib":%d,"heap_inuse_mib":%d,"heap_sys_mib":%d,"heap_released_mib":%d,"heap_objects":%d,"next_gc_mib":%d,' \
  $(( $(metric go_memstats_heap_alloc_bytes) >> 20 )) $(( $(metric go_memstats_heap_inuse_bytes) >> 20 )) \
  $(( $(metric go_memstats_heap_sys_bytes) >> 20 )) $(( $(metric go_memstats_heap_released_bytes) >> 20 )) \
  "$(metric go_memstats_heap_objects)" $(( $(metric go_memstats_next_gc_bytes) >> 20 ))
printf '"state_keys":%d,"state_bytes_mib":%d,"state_arena_mib":%d,"heap_profile":"%s"}\n' \
  "$(metric fanout_state_keys)" $(( $(metric fanout_state_bytes) >> 20 )) \
  $(( $(metric fanout_state_arena_bytes) >> 20 )) "$heap"
} | tee -a "$OUT/state-memory.jsonl"
