#!/usr/bin/env bash
# Issue 9's micro-benchmarks, old against new, interleaved: RUNS rounds of
#   old (OLD_REV, d2d88a0: the version table and the inbox, pkg/fanout; its code is
#   0012b1c's, whose pkg/fanout tests do not compile against that commit's new proto)
#     go test -run='^$' -bench='VersionTable|Inbox' -benchmem -count=1 ./pkg/fanout/
#     go test -run='^$' -bench='VersionTableGrow' -benchtime=1000000x -benchmem -count=1 ./pkg/fanout/
#       (Grow's own doc asks for 1000000x: with more admits it fills the table and churns)
#     plus BenchmarkVersionTableGC (below: written into the scratch export only), the
#     version table's counterpart of pkg/state's BenchmarkGC
#   new (this checkout, pkg/state)
#     go test -run='^$' -bench='Table|Scan|GC' -benchmem -count=1 ./pkg/state/
# each round after a wait for a quiet machine (bench/quiet.sh). The raw output goes to
# $OUT/state-micro-<time>-{old,new}.txt (benchstat reads them).
#   OLD_REV (d2d88a0), RUNS (3)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/quiet.sh
OLD_REV=${OLD_REV:-d2d88a0} RUNS=${RUNS:-3}
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
git archive "$OLD_REV" | tar -x -C "$old"
cat >"$old/pkg/fanout/versiongc_bench_test.go" <<'EOF'
package fanout

import (
	"runtime"
	"testing"
)

// BenchmarkVersionTableGC: one forced collection with a version table of 1M task_ids
// live (its default bound, --version-memory), as pkg/state's BenchmarkGC does for the
// state table, and the heap after a collection. The version table held stamps only;
// the events themselves waited in the inbox (bounded at 10,000) and were not kept.
func BenchmarkVersionTableGC(b *testing.B) {
	ids := benchIDs(1_000_000)
	vt := newVersionTable(1_000_000)
	accept := func() bool { return true }
	for i, id := range ids {
		vt.admitString(id, stamp{version: uint64(i + 1), origin: "node-a"}, accept)
	}
	ids = nil
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.GC()
	}
	b.StopTimer()
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(ms.HeapObjects), "heap-objects")
	runtime.KeepAlive(vt)
}
EOF

for i in $(seq "$RUNS"); do
  wait_quiet
  echo "== round $i: old ($OLD_REV)" >&2
  (cd "$old" && go test -run='^$' -bench='VersionTable|Inbox' -benchmem -count=1 ./pkg/fanout/ &&
    go test -run='^$' -bench='VersionTableGrow' -benchtime=1000000x -benchmem -count=1 ./pkg/fanout/ |
    sed 's/^BenchmarkVersionTableGrow/BenchmarkVersionTableGrow1M/') | tee -a "$OUT/state-micro-$stamp-old.txt"
  echo "== round $i: new" >&2
  go test -run='^$' -bench='Table|Scan|GC' -benchmem -count=1 ./pkg/state/ | tee -a "$OUT/state-micro-$stamp-new.txt"
done
echo "results: $OUT/state-micro-$stamp-{old,new}.txt"
