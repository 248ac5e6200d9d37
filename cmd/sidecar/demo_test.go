package main

import (
	"context"
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
