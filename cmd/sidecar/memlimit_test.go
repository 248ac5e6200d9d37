package main

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if v, ok := m[name]; ok {
				return []byte(v), nil
			}
			return nil, errors.New("no such file")
		}
	}
	none := files(nil)
	for _, tc := range []struct {
		name, flag, env string
		read            func(string) ([]byte, error)
		want            int64
		wantLog, errHas string
	}{
		{"auto, cgroup v2 limit", "auto", "", files(map[string]string{"/sys/fs/cgroup/memory.max": "268435456\n"}), 268435456 / 10 * 9, "90% of the container's 256 MiB", ""},
		{"auto, cgroup v2 without limit", "auto", "", files(map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}), -1, "the container has none", ""},
		{"auto, cgroup v1 limit", "auto", "", files(map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912"}), 536870912 / 10 * 9, "of the container's 512 MiB", ""},
		{"auto, cgroup v1 unlimited", "auto", "", files(map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"}), -1, "the container has none", ""},
		{"auto, no cgroup", "auto", "", none, -1, "no cgroup limit found", ""},
		{"auto, GOMEMLIMIT wins", "auto", "200MiB", files(map[string]string{"/sys/fs/cgroup/memory.max": "268435456"}), -1, "GOMEMLIMIT=200MiB", ""},
		{"a size", "240MiB", "", none, 240 << 20, "240 MiB (--memory-limit)", ""},
		{"a size wins over GOMEMLIMIT", "1GiB", "200MiB", none, 1 << 30, "1024 MiB", ""},
		{"off", "off", "", none, math.MaxInt64, "off", ""},
		{"no unit", "240", "", none, 0, "", `--memory-limit "240": no unit`},
		{"not a number", "lotsMiB", "", none, 0, "", "not a positive whole number"},
		{"negative", "-5MiB", "", none, 0, "", "not a positive whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, log, err := memoryLimit(tc.flag, tc.env, tc.read)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want || !strings.Contains(log, tc.wantLog) {
				t.Fatalf("memoryLimit = %d, %q, %v; want %d and a log containing %q", got, log, err, tc.want, tc.wantLog)
			}
		})
	}
}
