#!/usr/bin/env bash
# Issue 13's peer protocol A/B: `sidecar bench --spawn 3` with the batches on one
# ReplicateStream per peer (the default) against one unary Replicate call per batch
# (--replicate-stream=false), interleaved pairs (bench/ab.sh, whose settings apply):
# saturated and 10,000 events/s, one event per send and ten. Results in
# $OUT/stream-ab-<time>.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${WORKLOADS:=--rate 0 --batch 1;--rate 0 --batch 10;--rate 10000 --batch 1;--rate 10000 --batch 10}"
export WORKLOADS
bash bench/ab.sh stream-ab stream "" unary "--serve-flag=--replicate-stream=false"
