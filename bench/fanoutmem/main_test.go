package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	ok := options{sidecar: "x", nodes: 3, keys: 10, payload: 100, settleMax: time.Second, wait: time.Second, readyTimeout: time.Second}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		change func(*options)
		want   string
	}{
		{func(o *options) { o.nodes = 0 }, "--nodes must be >= 1, got 0"},
		{func(o *options) { o.keys = 0 }, "--keys must be >= 1, got 0"},
		{func(o *options) { o.payload = -1 }, "--payload must be >= 0"},
		{func(o *options) { o.settleMax = 0 }, "--settle-max, --wait and --ready-timeout must be > 0"},
	} {
		o := ok
		tc.change(&o)
		if err := o.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate() = %v, want %q", err, tc.want)
		}
	}
}

// Three real sidecars: every node ends up holding every key put through node 0, and
// each one's settled resident set grew by at least the payloads.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar and starts processes")
	}
	bin := filepath.Join(t.TempDir(), "sidecar")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fanout/fanout/cmd/sidecar").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const keys = 20000
	o := options{sidecar: bin, nodes: 3, keys: keys, payload: 100, settleMax: 10 * time.Second, wait: 60 * time.Second, readyTimeout: 30 * time.Second}
	r, err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.System != "fanout" || r.NotPut != 0 || len(r.StateKeys) != 3 || len(r.NodeMemory) != 3 {
		t.Fatalf("%+v", r)
	}
	for i, n := range r.StateKeys {
		if n != keys {
			t.Errorf("node %d holds %d keys, want %d", i, n, keys)
		}
	}
	if r.BytesPerKey < 100 {
		t.Errorf("%g bytes per key on %s, below the payload: %+v", r.BytesPerKey, r.BytesPerKeyOf, r.NodeMemory)
	}
	t.Logf("%d keys: %.0f B/key on %s, settled in %.1f s: %+v", keys, r.BytesPerKey, r.BytesPerKeyOf, r.SettleWaitS, r.NodeMemory)
}
