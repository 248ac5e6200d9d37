package main

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

// cgroupMemoryFiles hold a container's memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = [...]string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit decides Go's soft memory limit from --memory-limit. It returns the
// limit in bytes, -1 to leave Go's setting alone, and what to log. flag is "auto"
// (the default), "off", or a size such as 240MiB. With "auto", GOMEMLIMIT (env) wins,
// then 90 % of the cgroup limit found through readFile, else no limit.
func memoryLimit(flag, env string, readFile func(string) ([]byte, error)) (int64, string, error) {
	switch strings.ToLower(flag) {
	case "off", "0":
		return math.MaxInt64, "memory limit off (--memory-limit=off)", nil
	case "auto":
		if env != "" {
			return -1, "memory limit from GOMEMLIMIT=" + env, nil
		}
		for _, f := range cgroupMemoryFiles {
			b, err := readFile(f)
			if err != nil {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "unlimited"
				return -1, "no memory limit (the container has none; set --memory-limit to cap the heap)", nil
			}
			limit := n / 10 * 9
			return limit, fmt.Sprintf("memory limit %d MiB: 90%% of the container's %d MiB (%s)", limit>>20, n>>20, f), nil
		}
		return -1, "no memory limit (no cgroup limit found; set --memory-limit to cap the heap)", nil
	}
	n, err := parseSize(flag)
	if err != nil {
		return 0, "", fmt.Errorf("--memory-limit %q: %w; want auto, off, or a size like 240MiB", flag, err)
	}
	return n, fmt.Sprintf("memory limit %d MiB (--memory-limit)", n>>20), nil
}

// parseSize reads a byte size in GOMEMLIMIT's syntax: digits and B, KiB, MiB, GiB or
// TiB.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil || n <= 0 || n > math.MaxInt64>>u.shift {
				return 0, fmt.Errorf("%q is not a positive whole number", num)
			}
			return n << u.shift, nil
		}
	}
	return 0, fmt.Errorf("no unit")
}

// defaultPendingBytes is --max-pending-bytes without a memory limit: 256 MiB holds
// about a million events of 100 bytes pending, for one peer or spread over many.
const defaultPendingBytes = 256 << 20

// pendingBudget decides --max-pending-bytes when it is not given, from Go's memory
// limit (math.MaxInt64: none): a quarter of it, leaving the rest to the state table,
// the connections and the collector's headroom; without a limit, 256 MiB. It returns
// the bytes and what to log.
func pendingBudget(memLimit int64) (int, string) {
	if memLimit <= 0 || memLimit == math.MaxInt64 {
		return defaultPendingBytes, fmt.Sprintf("pending events bounded at %d MiB for all peers (--max-pending-bytes; no memory limit)", defaultPendingBytes>>20)
	}
	b := int(min(memLimit/4, math.MaxInt32))
	return b, fmt.Sprintf("pending events bounded at %d MiB for all peers: a quarter of the memory limit (--max-pending-bytes)", b>>20)
}
