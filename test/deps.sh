#!/usr/bin/env bash
# Installs what `make test` needs beyond Go, if it is missing, and says what it does:
#   - Debian's prometheus package: promtool checks a live node's /metrics, and a real
#     Prometheus runs every query of the Grafana dashboard (deploy/grafana);
#   - python3-grpcio and python3-grpc-tools (Debian's, for /usr/bin/python3): the
#     Python client example (examples/python) runs against a real cluster;
#   - Debian's dnsmasq-base: a real DNS server for the tests of DNS peer discovery
#     (internal/dnstest, used by pkg/discovery and test/e2e). The binary only: the
#     dnsmasq package adds a system service that would start at install and take
#     port 53 (next to systemd-resolved, on a developer's machine);
#   - Debian's nats-server: the NATS side of `make bench-compare` (bench/natsbench) is
#     tested against a real 3-server cluster, and internal/natstest shows what this
#     old release (2.9.10) gets wrong next to the one the JetStream tests run (pinned
#     in tools/go.mod and built by go, not installed here);
#   - Node.js and npm (Debian's nodejs and npm, only if there is no node or npm at
#     all), and examples/node's packages (@grpc/grpc-js, @grpc/proto-loader) by
#     `npm ci` from its package-lock.json: the Node.js client example runs too.
# Debian packages need root (or sudo); without either it prints the command to run and
# fails, so a test never skips for want of a tool.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v promtool >/dev/null || missing+=(prometheus)
/usr/bin/python3 -c 'import grpc' 2>/dev/null || missing+=(python3-grpcio)
/usr/bin/python3 -c 'import grpc_tools' 2>/dev/null || missing+=(python3-grpc-tools)
# dnsmasq lives in /usr/sbin, which a user's PATH may lack.
command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ] || missing+=(dnsmasq-base)
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "test/deps.sh: installing Debian packages: ${missing[*]}"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "test/deps.sh: need root to install; run: apt-get install -y ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -q
  # --no-install-recommends: the prometheus binaries, not its web assets or exporters.
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# examples/node's packages, exactly as its package-lock.json pins them. npm ci starts
# from an empty node_modules, so it runs only when node_modules is missing or was
# installed from another package.json or lock file: the stamp holds their hash and is
# written after npm ci succeeded.
node_dir=examples/node
want=$(cat "$node_dir/package.json" "$node_dir/package-lock.json" | sha256sum | cut -d' ' -f1)
stamp=$node_dir/node_modules/.fanout-deps.sha256
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "test/deps.sh: npm ci in $node_dir (node_modules missing or stale)"
  (cd "$node_dir" && npm ci --ignore-scripts --no-audit --no-fund)
  echo "$want" >"$stamp"
fi
