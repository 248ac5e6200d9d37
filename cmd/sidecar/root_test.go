package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"node-id":                     "FANOUT_NODE_ID",
		"max-batching-delay":          "FANOUT_MAX_BATCHING_DELAY",
		"batch-idle-flush":            "FANOUT_BATCH_IDLE_FLUSH",
		"network-failure-retry-delay": "FANOUT_NETWORK_FAILURE_RETRY_DELAY",
	} {
		if got := envName(flag); got != want {
			t.Errorf("envName(%q) = %q, want %q", flag, got, want)
		}
	}
}

func TestServeFlagsFromEnvironment(t *testing.T) {
	t.Setenv("FANOUT_MAX_BATCH", "17")
	t.Setenv("FANOUT_MAX_BATCHING_DELAY", "250ms")
	t.Setenv("FANOUT_BATCH_IDLE_FLUSH", "20ms")
	t.Setenv("FANOUT_NODE_ID", "from-env")
	o := defaultServeOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse([]string{"--node-id", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := bindEnv(fs); err != nil {
		t.Fatal(err)
	}
	if o.node.Batcher.MaxBatch != 17 || o.node.Batcher.MaxBatchingDelay != 250*time.Millisecond {
		t.Fatalf("env not applied: max-batch %d delay %s", o.node.Batcher.MaxBatch, o.node.Batcher.MaxBatchingDelay)
	}
	if o.node.Batcher.IdleFlush != 20*time.Millisecond {
		t.Fatalf("env not applied: batch-idle-flush %s", o.node.Batcher.IdleFlush)
	}
	if o.node.NodeID != "from-flag" {
		t.Fatalf("node id %q: a flag on the command line must win over FANOUT_NODE_ID", o.node.NodeID)
	}
}

func TestBadEnvValueNamesTheVariable(t *testing.T) {
	t.Setenv("FANOUT_WORKERS", "many")
	root := newRootCmd()
	root.SetArgs([]string{"serve"})
	root.SetOut(&bytes.Buffer{})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "FANOUT_WORKERS") {
		t.Fatalf("err = %v, want it to name FANOUT_WORKERS", err)
	}
}

func TestVersionCommand(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil || !strings.HasPrefix(out.String(), "sidecar dev") {
		t.Fatalf("version: %q, %v", out.String(), err)
	}
}

func TestSetProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	for _, tc := range []struct {
		name      string
		n         int
		flagGiven bool
		env       string
		want      int // GOMAXPROCS after; 0: unchanged
	}{
		{"default sets one thread", 1, false, "", 1},
		{"the flag wins over GOMAXPROCS", 3, true, "5", 3},
		{"GOMAXPROCS wins over the flag's default", 1, false, "5", 0},
		{"0 keeps Go's default", 0, true, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(7)
			if err := setProcs(tc.n, tc.flagGiven, tc.env); err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if want == 0 {
				want = 7
			}
			if got := runtime.GOMAXPROCS(0); got != want {
				t.Fatalf("GOMAXPROCS = %d, want %d", got, want)
			}
		})
	}
	if err := setProcs(-1, true, ""); err == nil || !strings.Contains(err.Error(), "--gomaxprocs") {
		t.Fatalf("err = %v, want it to name --gomaxprocs", err)
	}
}

// TestClientCommandsReadOnlyAddrFromEnv: a pod's FANOUT_* variables are for serve; a
// client command run in the pod takes only FANOUT_ADDR.
func TestClientCommandsReadOnlyAddrFromEnv(t *testing.T) {
	t.Setenv("FANOUT_ADDR", "unix:///tmp/x.sock")
	t.Setenv("FANOUT_MAX_BATCH", "250")
	t.Setenv("FANOUT_TIMEOUT", "1ms")
	cmd := newWatchCmd()
	if err := bindEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"addr": "unix:///tmp/x.sock", "max-batch": "0", "timeout": "0s"} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s = %q from the environment, want %q", flag, got, want)
		}
	}
	serve := newServeCmd()
	if err := bindEnv(serve.Flags()); err != nil {
		t.Fatal(err)
	}
	if got := serve.Flags().Lookup("max-batch").Value.String(); got != "250" {
		t.Errorf("serve --max-batch = %q, want 250 from FANOUT_MAX_BATCH", got)
	}
}
