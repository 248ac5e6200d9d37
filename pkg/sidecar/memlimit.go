package sidecar

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The Go heap grows to about twice its live size before a collection (GOGC=100). A
// node holding a million keys lives in ~230 MiB and so reached 330-350 MiB RSS; with a
// soft limit just above the live heap it stays at ~250 MiB (docs/BENCHMARKS.md). In a
// container the limit that matters is the cgroup's, so by default the sidecar takes
// 90 % of it, the way automemlimit does, leaving room for memory Go does not manage.

// MemoryLimit says how Start sets Go's soft memory limit (debug.SetMemoryLimit). The
// zero value leaves it alone.
type MemoryLimit struct {
	// Auto: GOMEMLIMIT if it is set (Go has applied it), else 90 % of the container's
	// cgroup limit, else none. Bytes is then ignored.
	Auto bool
	// Bytes > 0 sets the limit to this many bytes; math.MaxInt64 turns it off (Go's
	// own default, and what GOMEMLIMIT=off gives). 0 or less: leave it alone.
	Bytes int64
}

// cgroupMemoryFiles hold a container's memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = [...]string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit decides Go's soft memory limit from m. It returns the limit in bytes,
// -1 to leave Go's setting alone, and what to log ("" for nothing). With m.Auto,
// GOMEMLIMIT (env) wins, then 90 % of the cgroup limit found through readFile, else no
// limit.
func memoryLimit(m MemoryLimit, env string, readFile func(string) ([]byte, error)) (int64, string) {
	switch {
	case m.Auto:
		if env != "" {
			return -1, "memory limit from GOMEMLIMIT=" + env
		}
		for _, f := range cgroupMemoryFiles {
			b, err := readFile(f)
			if err != nil {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "unlimited"
				return -1, "no memory limit (the container has none; set --memory-limit to cap the heap)"
			}
			limit := n / 10 * 9
			return limit, fmt.Sprintf("memory limit %d MiB: 90%% of the container's %d MiB (%s)", limit>>20, n>>20, f)
		}
		return -1, "no memory limit (no cgroup limit found; set --memory-limit to cap the heap)"
	case m.Bytes == math.MaxInt64:
		return math.MaxInt64, "memory limit off (--memory-limit=off)"
	case m.Bytes > 0:
		return m.Bytes, fmt.Sprintf("memory limit %d MiB (--memory-limit)", m.Bytes>>20)
	}
	return -1, ""
}

// defaultPendingBytes is mesh.Config.MaxPendingBytes without a memory limit: 256 MiB
// holds about a million events of 100 bytes pending, for one peer or spread over many.
const defaultPendingBytes = 256 << 20

// pendingBudget decides mesh.Config.MaxPendingBytes when it is not given, from Go's
// memory limit (math.MaxInt64: none): a quarter of it, leaving the rest to the state
// table, the connections and the collector's headroom; without a limit, 256 MiB. It
// returns the bytes and what to log.
func pendingBudget(memLimit int64) (int, string) {
	if memLimit <= 0 || memLimit == math.MaxInt64 {
		return defaultPendingBytes, fmt.Sprintf("pending events bounded at %d MiB for all peers (--max-pending-bytes; no memory limit)", defaultPendingBytes>>20)
	}
	b := int(min(memLimit/4, math.MaxInt32))
	return b, fmt.Sprintf("pending events bounded at %d MiB for all peers: a quarter of the memory limit (--max-pending-bytes)", b>>20)
}
