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
	if o.cfg.Mesh.Batcher.MaxBatch != 17 || o.cfg.Mesh.Batcher.MaxBatchingDelay != 250*time.Millisecond {
		t.Fatalf("env not applied: max-batch %d delay %s", o.cfg.Mesh.Batcher.MaxBatch, o.cfg.Mesh.Batcher.MaxBatchingDelay)
	}
	if o.cfg.Mesh.Batcher.IdleFlush != 20*time.Millisecond {
		t.Fatalf("env not applied: batch-idle-flush %s", o.cfg.Mesh.Batcher.IdleFlush)
	}
	if o.cfg.Node.NodeID != "from-flag" {
		t.Fatalf("node id %q: a flag on the command line must win over FANOUT_NODE_ID", o.cfg.Node.NodeID)
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

// TestEnvInHelpAndUnknownEnv: each flag that reads the environment names its
// variable in --help, and a FANOUT_* variable no command reads is warned about, with
// the closest known name.
func TestEnvInHelpAndUnknownEnv(t *testing.T) {
	ctx := testContext(t)
	out, _, err := runCLI(ctx, []string{"status", "--help"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"[$FANOUT_ADDR]", "[$FANOUT_TOKEN_FILE]"} {
		if !strings.Contains(out, want) {
			t.Errorf("status --help lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "$FANOUT_TIMEOUT") {
		t.Error("status --help says --timeout reads FANOUT_TIMEOUT, which it does not")
	}

	t.Setenv("FANOUT_MAX_BUFER", "5")
	t.Setenv("FANOUT_MAX_BATCH", "5") // serve's: known, not warned about in version
	_, stderr, err := runCLI(ctx, []string{"version"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "warning: FANOUT_MAX_BUFER is set but no sidecar command reads it") ||
		!strings.Contains(stderr, "did you mean FANOUT_MAX_BUFFER?") || strings.Contains(stderr, "FANOUT_MAX_BATCH") {
		t.Errorf("stderr %q, want one warning for FANOUT_MAX_BUFER naming FANOUT_MAX_BUFFER", stderr)
	}
}

// TestServeHelpGroups: serve's help puts every flag under exactly one heading.
func TestServeHelpGroups(t *testing.T) {
	cmd := newServeCmd()
	seen := map[string]int{}
	for _, g := range serveFlagGroups() {
		for _, f := range g.flags {
			seen[f]++
			if cmd.Flags().Lookup(f) == nil {
				t.Errorf("group %q lists --%s, which serve does not have", g.title, f)
			}
		}
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if seen[f.Name] != 1 {
			t.Errorf("--%s is in %d groups of serve --help, want 1: add it to serveFlagGroups", f.Name, seen[f.Name])
		}
	})
	out, _, err := runCLI(testContext(t), []string{"serve", "--help"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range serveFlagGroups() {
		if !strings.Contains(out, "\n"+g.title+":\n") {
			t.Errorf("serve --help lacks the heading %q", g.title)
		}
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		n := 0
		for line := range strings.Lines(out) {
			line = strings.TrimLeft(line, " ")
			if strings.HasPrefix(line, "--"+f.Name+" ") || (f.Shorthand != "" && strings.HasPrefix(line, "-"+f.Shorthand+", --"+f.Name+" ")) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("serve --help shows --%s %d times, want once", f.Name, n)
		}
	})
	for _, word := range []string{"seed 0", "SPEC §"} {
		if strings.Contains(out, word) {
			t.Errorf("serve --help says %q, which means nothing to a user", word)
		}
	}
}
