#!/usr/bin/env bash
# make bench-memory: the memory targets of docs/BENCHMARKS.md, measured on real processes.
#  1. idle: one node (one unreachable peer) after IDLE seconds: RSS and CPU ticks used.
#  2. pending: one node with two unreachable peers holding 10,000 pending 100-byte events
#     for each (100 Submits of 100 unique events), peak RSS (VmHWM).
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE=${IDLE:-10}
mkdir -p bin
go build -o bin/sidecar ./cmd/sidecar
go build -modfile=tools/go.mod -o bin/grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
field() { awk -v k="$2:" '$1==k {print $2}' "/proc/$1/status"; } # kB
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }               # utime+stime
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

start() { # peers... ; sets $pid and $app
  app=127.0.0.1:$(free_port)
  bin/sidecar serve --node-id mem --app-addr "$app" --peer-addr "127.0.0.1:$(free_port)" --admin-addr "" \
    --peers "$1" --log-level warn 2>/dev/null &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 100); do bin/grpcurl -plaintext "$app" fanout.v1.FanoutService/GetStatus >/dev/null 2>&1 && return; sleep 0.1; done
  echo "node did not start" >&2; exit 1
}

dead1=127.0.0.1:$(free_port) dead2=127.0.0.1:$(free_port)  # nothing listens there

start "$dead1"
t0=$(ticks "$pid"); sleep "$IDLE"; t1=$(ticks "$pid")
echo "idle node: RSS $(( $(field "$pid" VmRSS) / 1024 )) MiB, $((t1 - t0)) CPU ticks in ${IDLE}s"

start "$dead1,$dead2"
payload=$(head -c 100 /dev/zero | base64 -w0)
for r in $(seq 0 99); do
  python3 - "$r" "$payload" <<'PY' | bin/grpcurl -plaintext -d @ "$app" fanout.v1.FanoutService/Submit >/dev/null
import json, sys
r, p = int(sys.argv[1]), sys.argv[2]
print(json.dumps({"events": [{"taskId": f"mem-{r}-{i}", "payload": p} for i in range(100)]}))
PY
done
status=$(bin/grpcurl -plaintext "$app" fanout.v1.FanoutService/GetStatus)
pending=$(python3 -c '
import json, sys
s = json.loads(sys.stdin.read())
print("; ".join("%s pending %s overflow %s" % (p["address"], p.get("pending", 0), p.get("overflow", 0)) for p in s["peers"]))' <<<"$status")
echo "pending node: peak RSS $(( $(field "$pid" VmHWM) / 1024 )) MiB with $pending"
