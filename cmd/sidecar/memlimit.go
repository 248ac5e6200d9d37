package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/fanout/fanout/pkg/sidecar"
)

// parseMemoryLimit reads --memory-limit: "auto" (the default: GOMEMLIMIT if set, else
// 90 % of the container's cgroup limit, else none; pkg/sidecar decides at start),
// "off" (or 0), or a size such as 240MiB.
func parseMemoryLimit(flag string) (sidecar.MemoryLimit, error) {
	switch strings.ToLower(flag) {
	case "off", "0":
		return sidecar.MemoryLimit{Bytes: math.MaxInt64}, nil
	case "auto":
		return sidecar.MemoryLimit{Auto: true}, nil
	}
	n, err := parseSize(flag)
	if err != nil {
		return sidecar.MemoryLimit{}, fmt.Errorf("--memory-limit %q: %w; want auto, off, or a size like 240MiB", flag, err)
	}
	return sidecar.MemoryLimit{Bytes: n}, nil
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
