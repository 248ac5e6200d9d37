package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"negative rate", []string{"bench", "--rate", "-1"}, "--rate must be >= 0"},
		{"zero batch", []string{"bench", "--batch", "0"}, "--batch must be between 1 and 10000"},
		{"spawn and app-addrs", []string{"bench", "--spawn", "3", "--app-addrs", "a:1,b:2"}, "--spawn and --app-addrs"},
		{"one app addr", []string{"bench", "--app-addrs", "a:1"}, "--app-addrs needs at least 2"},
		{"serve flag before --", []string{"bench", "--workers=8"}, "unknown flag: --workers"},
		{"stray argument", []string{"bench", "workers"}, "serve flags for spawned nodes go after --"},
		{"reserved serve flag", []string{"bench", "--", "--peers=x:1"}, `serve flag "--peers=x:1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRootCmd()
			root.SetArgs(tc.args)
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestBenchRateFromEnvironment(t *testing.T) {
	t.Setenv("FANOUT_RATE", "-7")
	root := newRootCmd()
	root.SetArgs([]string{"bench"})
	root.SetOut(&bytes.Buffer{})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--rate must be >= 0, got -7") {
		t.Fatalf("err = %v, want FANOUT_RATE applied and refused", err)
	}
}
