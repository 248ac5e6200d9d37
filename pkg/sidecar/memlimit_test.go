package sidecar

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
	auto := MemoryLimit{Auto: true}
	for _, tc := range []struct {
		name    string
		m       MemoryLimit
		env     string
		read    func(string) ([]byte, error)
		want    int64
		wantLog string
	}{
		{"auto, cgroup v2 limit", auto, "", files(map[string]string{"/sys/fs/cgroup/memory.max": "268435456\n"}), 268435456 / 10 * 9, "90% of the container's 256 MiB"},
		{"auto, cgroup v2 without limit", auto, "", files(map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}), -1, "the container has none"},
		{"auto, cgroup v1 limit", auto, "", files(map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "536870912"}), 536870912 / 10 * 9, "of the container's 512 MiB"},
		{"auto, cgroup v1 unlimited", auto, "", files(map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"}), -1, "the container has none"},
		{"auto, no cgroup", auto, "", none, -1, "no cgroup limit found"},
		{"auto, GOMEMLIMIT wins", auto, "200MiB", files(map[string]string{"/sys/fs/cgroup/memory.max": "268435456"}), -1, "GOMEMLIMIT=200MiB"},
		{"a size", MemoryLimit{Bytes: 240 << 20}, "", none, 240 << 20, "240 MiB (--memory-limit)"},
		{"a size wins over GOMEMLIMIT", MemoryLimit{Bytes: 1 << 30}, "200MiB", none, 1 << 30, "1024 MiB"},
		{"off", MemoryLimit{Bytes: math.MaxInt64}, "", none, math.MaxInt64, "off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, log := memoryLimit(tc.m, tc.env, tc.read)
			if got != tc.want || !strings.Contains(log, tc.wantLog) {
				t.Fatalf("memoryLimit = %d, %q; want %d and a log containing %q", got, log, tc.want, tc.wantLog)
			}
		})
	}
	t.Run("the zero value leaves Go's limit alone", func(t *testing.T) {
		read := func(string) ([]byte, error) { t.Fatal("read a cgroup file"); return nil, nil }
		if got, log := memoryLimit(MemoryLimit{}, "200MiB", read); got != -1 || log != "" {
			t.Fatalf("memoryLimit(zero) = %d, %q; want -1 and nothing to log", got, log)
		}
	})
}
