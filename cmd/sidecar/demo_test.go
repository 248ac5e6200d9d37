package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// demoTimeout bounds TestDemoShowsLiveTraffic: the demo runs until its view has shown
// every link and every node delivering, two or three redraws a second apart on an
// idle machine, and at most this long on a loaded one, where the nodes start late.
const demoTimeout = 60 * time.Second

// TestDemoShowsLiveTraffic runs the newcomer's first command until its view has shown
// all six peer links and every node delivering events, and checks that it then stops
// cleanly.
func TestDemoShowsLiveTraffic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), demoTimeout)
	defer cancel()
	view := &demoView{stop: cancel}
	o := demoOptions{nodes: 3, rate: 600, keys: 100, payload: 16, logLevel: "error"}
	if err := runDemo(ctx, o, view); err != nil {
		t.Fatalf("demo: %v", err)
	}
	text := view.b.String()
	for _, m := range demoMissing(text) {
		t.Errorf("the view never showed %s within %v:\n%s", m, demoTimeout, text)
	}
	if !strings.Contains(text, "demo stopped") {
		t.Error("the demo did not stop cleanly once cancelled")
	}
}

// demoView is the demo's output: it stops the demo once the view has shown everything
// demoMissing looks for. runDemo writes from its own goroutine only.
type demoView struct {
	b    strings.Builder
	stop context.CancelFunc
}

func (v *demoView) Write(p []byte) (int, error) {
	v.b.Write(p)
	if len(demoMissing(v.b.String())) == 0 {
		v.stop()
	}
	return len(p), nil
}

// demoRow is a node row of the view, "node-x  DELIVERED/S  INBOX".
var demoRow = regexp.MustCompile(`(?m)^\s*(node-[abc])\s+(\d+)\s+\d+`)

// demoMissing lists what the view text has not shown yet: a link (peer node ids
// are learned from the first batch), or a node with a delivered/s above 0.
func demoMissing(text string) []string {
	var out []string
	for _, link := range []string{"node-a → node-b", "node-a → node-c", "node-b → node-a", "node-b → node-c", "node-c → node-a", "node-c → node-b"} {
		if !strings.Contains(text, link) {
			out = append(out, "link "+link+" (peer node ids are learned from the first batch)")
		}
	}
	delivered := map[string]int{}
	for _, m := range demoRow.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[2])
		delivered[m[1]] = max(delivered[m[1]], n)
	}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		if delivered[node] == 0 {
			out = append(out, node+" with a delivered/s above 0")
		}
	}
	return out
}

// TestDemoBasePort: --base-port puts node i's app on P+2i and its peer listener on
// P+2i+1; a port in use is an error that names the flag.
func TestDemoBasePort(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var nodes []*demoNode
	var base int
	for attempt := 0; nodes == nil; attempt++ { // six ports in a row that are free now
		base = 20000 + rand.IntN(20000)
		var err error
		if nodes, err = startDemoCluster(3, base, log); err != nil && (attempt == 20 || !strings.Contains(err.Error(), "address already in use")) {
			t.Fatal(err)
		}
	}
	for i, n := range nodes {
		if got, want := n.sc.AppAddr(), fmt.Sprintf("127.0.0.1:%d", base+2*i); got != want {
			t.Errorf("node %d's app on %s, want %s", i, got, want)
		}
		if got, want := n.sc.PeerAddr(), fmt.Sprintf("127.0.0.1:%d", base+2*i+1); got != want {
			t.Errorf("node %d's peer listener on %s, want %s", i, got, want)
		}
	}
	_, err := startDemoCluster(3, base, log) // the same ports again: taken
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = n.sc.Shutdown(ctx)
		cancel()
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--base-port %d: ", base)) {
		t.Errorf("a second demo on the same ports: %v, want an error naming --base-port", err)
	}
	if err := runDemo(context.Background(), demoOptions{nodes: 3, rate: 1, keys: 1, basePort: 65533}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--base-port 65533: want 0 (free ports) or 1 to 65530") {
		t.Errorf("--base-port 65533: %v", err)
	}
}
