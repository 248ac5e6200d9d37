#!/usr/bin/env bash
# An A/B of two revisions' builds with the same flags: each revision is built from a
# temporary git worktree, then bench/ab.sh runs them in interleaved pairs (its
# settings apply: RUNS, DURATION, WORKLOADS, QUIET_WAIT...).
#
#   bench/rev-ab.sh NAME REV_A REV_B
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: bench/rev-ab.sh NAME REV_A REV_B" >&2; exit 2; }
build() { # rev -> path of its sidecar binary
  local rev dir
  rev=$(git rev-parse --short "$1")
  dir=$(mktemp -d /tmp/rev-ab-XXXXXX)
  git worktree add -q --detach "$dir/src" "$rev" >&2
  go build -C "$dir/src" -o "$dir/sidecar" ./cmd/sidecar >&2
  git worktree remove --force "$dir/src" >&2
  echo "$dir/sidecar"
}
a=$(git rev-parse --short "$2") b=$(git rev-parse --short "$3")
A_BIN=$(build "$a") B_BIN=$(build "$b") A_REV=$a B_REV=$b bash bench/ab.sh "$1" "$a" "" "$b" ""
