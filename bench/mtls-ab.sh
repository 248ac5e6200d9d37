#!/usr/bin/env bash
# Issue 12's cost of mutual TLS between peers: `sidecar bench --spawn 3` of one build
# with plaintext peers and with --peer-tls-* (a CA and a certificate per node made
# here by openssl: ECDSA P-256, DNS name bench-N.fanout.bench), RUNS interleaved
# pairs per workload: saturated (--rate 0) and 10,000 events/s. Each pair waits for a
# quiet machine (bench/quiet.sh); every run's JSON line goes to
# $OUT/mtls-ab-<time>.jsonl. Prints a markdown table. The A/B loop is bench/ab.sh's,
# and so are its settings (RUNS, DURATION, WORKLOADS, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
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

flags="--serve-flag=--peer-tls-cert=$pki/{id}/tls.crt --serve-flag=--peer-tls-key=$pki/{id}/tls.key"
flags+=" --serve-flag=--peer-tls-ca=$pki/{id}/ca.crt"
bash bench/ab.sh mtls-ab plaintext "" mtls "$flags"
