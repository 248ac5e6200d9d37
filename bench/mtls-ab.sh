#!/usr/bin/env bash
# Issue 12's cost of mutual TLS between peers: `sidecar bench --spawn 3` of one build
# with plaintext peers and with --peer-tls-* (a CA and a certificate per node made
# here by openssl: ECDSA P-256, DNS name bench-N.fanout.bench), RUNS interleaved
# pairs per workload: saturated (--rate 0) and 10,000 events/s. Each pair waits for a
# quiet machine (bench/quiet.sh); every run's JSON line goes to
# $OUT/mtls-ab-<time>.jsonl. Prints a markdown table.
#   BIN (/tmp/mtls-sidecar, built from HEAD), RUNS (3), DURATION (6s), WARMUP (1s),
#   WORKLOADS ("0 10000": the --rate of each), OUT (bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/quiet.sh
BIN=${BIN:-/tmp/mtls-sidecar}
RUNS=${RUNS:-3} DURATION=${DURATION:-6s} WARMUP=${WARMUP:-1s} WORKLOADS=${WORKLOADS:-0 10000}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
results="$OUT/mtls-ab-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
go build -o "$BIN" ./cmd/sidecar
rev=$(git rev-parse --short HEAD)

pki=$(mktemp -d)
trap 'rm -rf "$pki"' EXIT
openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key"
openssl req -x509 -new -key "$pki/ca.key" -subj /CN=bench-ca -days 1 -out "$pki/ca.crt" 2>/dev/null
for i in 0 1 2; do
  d="$pki/bench-$i"
  mkdir -p "$d"
  cp "$pki/ca.crt" "$d/ca.crt"
  openssl ecparam -name prime256v1 -genkey -noout -out "$d/tls.key"
  openssl req -new -key "$d/tls.key" -subj "/CN=bench-$i.fanout.bench" -out "$d/tls.csr" 2>/dev/null
  printf 'subjectAltName=DNS:bench-%s.fanout.bench\nextendedKeyUsage=serverAuth,clientAuth\n' "$i" >"$d/ext"
  openssl x509 -req -in "$d/tls.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 1 \
    -extfile "$d/ext" -out "$d/tls.crt" 2>/dev/null
done

for rate in $WORKLOADS; do
  for i in $(seq "$RUNS"); do
    wait_quiet
    for side in plaintext mtls; do
      flags=()
      [ "$side" = mtls ] && flags=(--serve-flag="--peer-tls-cert=$pki/{id}/tls.crt"
        --serve-flag="--peer-tls-key=$pki/{id}/tls.key" --serve-flag="--peer-tls-ca=$pki/{id}/ca.crt")
      echo "== rate $rate run $i: $side" >&2
      load=$(cut -d' ' -f1 /proc/loadavg) b0=$(busy_s)
      json=$("$BIN" bench --spawn 3 --duration "$DURATION" --warmup "$WARMUP" --rate "$rate" "${flags[@]}" --json 2>/dev/null | tail -1)
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
print("| rate | run | peers | load1 at start | others' CPU s | submitted/s | delivered/s | p50 µs | p99 µs | CPU µs/delivered | node peak RSS MiB | dropped |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    x = r["result"]
    print(f"| {r['rate'] or 'saturated'} | {r['run']} | {r['side']} | {r['load1']:.2f} | {r['other_cpu_s']:.1f} | {x['submit_per_sec']:,.0f} | "
          f"{x['delivered_per_sec']:,.0f} | {x['p50_us']:,} | {x['p99_us']:,} | {x['cpu_us_per_delivered']:.2f} | "
          f"{x['node_peak_rss_bytes']/2**20:.0f} | {x['dropped']} |")
PY
