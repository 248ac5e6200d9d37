package main

import (
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/fanout/fanout/pkg/sidecar"
)

// TestParseMemoryLimit: --memory-limit's values; what each decides at start is
// pkg/sidecar's TestMemoryLimit.
func TestParseMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, flag string
		want       sidecar.MemoryLimit
		errHas     string
	}{
		{"auto", "auto", sidecar.MemoryLimit{Auto: true}, ""},
		{"a size", "240MiB", sidecar.MemoryLimit{Bytes: 240 << 20}, ""},
		{"a bigger size", "1GiB", sidecar.MemoryLimit{Bytes: 1 << 30}, ""},
		{"off", "off", sidecar.MemoryLimit{Bytes: math.MaxInt64}, ""},
		{"0 is off", "0", sidecar.MemoryLimit{Bytes: math.MaxInt64}, ""},
		{"no unit", "240", sidecar.MemoryLimit{}, `--memory-limit "240": no unit`},
		{"not a number", "lotsMiB", sidecar.MemoryLimit{}, "not a positive whole number"},
		{"negative", "-5MiB", sidecar.MemoryLimit{}, "not a positive whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMemoryLimit(tc.flag)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %v, want one containing %q", err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseMemoryLimit(%q) = %+v, %v; want %+v", tc.flag, got, err, tc.want)
			}
		})
	}
}

// TestLogFormat: --log-format json and text, auto (json when stderr is not a
// terminal, as here), and an unknown one refused.
func TestLogFormat(t *testing.T) {
	for format, want := range map[string]string{"json": `{"time":`, "text": "time=", "auto": `{"time":`, "TEXT": "time="} {
		var b strings.Builder
		log, err := newLogger(format, slog.LevelInfo, &b)
		if err != nil {
			t.Fatalf("--log-format %s: %v", format, err)
		}
		log.Info("hello")
		if !strings.HasPrefix(b.String(), want) {
			t.Errorf("--log-format %s wrote %q, want it to start %q", format, b.String(), want)
		}
	}
	if _, err := newLogger("yaml", slog.LevelInfo, io.Discard); err == nil || !strings.Contains(err.Error(), `--log-format "yaml": want json, text or auto`) {
		t.Errorf("--log-format yaml: %v", err)
	}
}
