#!/usr/bin/env bash
# Installs what `make test` needs beyond Go, if it is missing, and says what it does:
#   - promtool (Debian's prometheus package): checks a live node's /metrics;
#   - python3-grpcio and python3-grpc-tools (Debian's, for /usr/bin/python3): the
#     Python client example runs against a real cluster.
# Debian packages need root (or sudo); without either it prints the command to run and
# fails, so a test never skips for want of a tool.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v promtool >/dev/null || missing+=(prometheus)
/usr/bin/python3 -c 'import grpc' 2>/dev/null || missing+=(python3-grpcio)
/usr/bin/python3 -c 'import grpc_tools' 2>/dev/null || missing+=(python3-grpc-tools)

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
  # --no-install-recommends: promtool is all we need of prometheus, not its web assets.
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
