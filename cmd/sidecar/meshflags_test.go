package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestMeshOnlyFlags: with --transport=jetstream every mesh-only flag is refused,
// given on the command line (even at its default value) or by its FANOUT_* variable,
// before anything starts; the list names only serve flags, and covers every flag of
// the peers', batching and failures groups but the few the JetStream transport uses.
func TestMeshOnlyFlags(t *testing.T) {
	meshAndJetStream := map[string]string{
		"task-ttl": "the outbox drops an event not published within it, as the mesh's batchers do",
	}
	serve := newServeCmd()
	for _, name := range meshOnlyFlags() {
		if serve.Flags().Lookup(name) == nil {
			t.Errorf("meshOnlyFlags lists --%s, which serve does not have", name)
		}
	}
	for _, g := range serveFlagGroups() {
		if !strings.HasPrefix(g.title, "Peers") && g.title != "Batching" && !strings.HasPrefix(g.title, "Failures") {
			continue
		}
		for _, f := range g.flags {
			if _, shared := meshAndJetStream[f]; !shared && !slices.Contains(meshOnlyFlags(), f) {
				t.Errorf("--%s (group %q) is neither in meshOnlyFlags nor known to be used by the JetStream transport", f, g.title)
			}
		}
	}

	base := []string{"serve", "--transport=jetstream", "--nats-url=" + unreachableNATS, "--app-addr=127.0.0.1:0", "--admin-addr="}
	for _, name := range meshOnlyFlags() {
		t.Run(name, func(t *testing.T) {
			f := serve.Flags().Lookup(name)
			_, _, err := runCLI(testContext(t), append(base, "--"+name+"="+f.DefValue), "")
			want := "--" + name + ": not used with --transport=jetstream (the stream carries the events): remove it (or its " + envName(name) + "; only the mesh uses it)"
			if err == nil || err.Error() != want {
				t.Fatalf("serve --%s=%s with --transport=jetstream = %v, want %q", name, f.DefValue, err, want)
			}
		})
	}

	t.Run("from the environment, several at once", func(t *testing.T) {
		t.Setenv("FANOUT_TRANSPORT", "jetstream")
		t.Setenv("FANOUT_NATS_URL", unreachableNATS)
		t.Setenv("FANOUT_WORKERS", "4")
		t.Setenv("FANOUT_ANTI_ENTROPY_INTERVAL", "1m")
		_, _, err := runCLI(testContext(t), []string{"serve", "--app-addr=127.0.0.1:0", "--admin-addr="}, "")
		if err == nil {
			t.Fatal("serve accepted FANOUT_WORKERS and FANOUT_ANTI_ENTROPY_INTERVAL with FANOUT_TRANSPORT=jetstream")
		}
		for _, want := range []string{"--workers: not used with --transport=jetstream", "(or its FANOUT_WORKERS;",
			"--anti-entropy-interval: not used with --transport=jetstream", "(or its FANOUT_ANTI_ENTROPY_INTERVAL;"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %q, want it to contain %q", err, want)
			}
		}
	})

	t.Run("not refused", func(t *testing.T) {
		every := []string{}
		for _, name := range meshOnlyFlags() {
			every = append(every, "--"+name+"="+serve.Flags().Lookup(name).DefValue)
		}
		for _, tc := range []struct {
			transport string
			args      []string
		}{
			{"mesh", every}, // the mesh uses them all
			{"jetstream", []string{"--task-ttl=1m", "--nats-url=" + unreachableNATS, "--data-dir=/tmp/x", "--state-max-keys=10", "--shutdown-timeout=1s"}},
		} {
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o := defaultServeOptions()
			o.addFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := refuseMeshFlags(fs, tc.transport); err != nil {
				t.Errorf("--transport=%s %v: refused: %v", tc.transport, tc.args, err)
			}
		}
	})
}
