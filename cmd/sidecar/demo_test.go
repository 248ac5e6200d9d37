package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDemoShowsLiveTraffic runs the newcomer's first command for a few seconds and
// checks that its view shows all six peer links and every node delivering events.
func TestDemoShowsLiveTraffic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	var out bytes.Buffer
	o := demoOptions{nodes: 3, rate: 600, keys: 100, payload: 16, logLevel: "error"}
	if err := runDemo(ctx, o, &out); err != nil {
		t.Fatalf("demo: %v", err)
	}
	text := out.String()
	for _, link := range []string{"node-a → node-b", "node-a → node-c", "node-b → node-a", "node-b → node-c", "node-c → node-a", "node-c → node-b"} {
		if !strings.Contains(text, link) {
			t.Errorf("the view never showed link %s (peer node ids are learned from the first batch)", link)
		}
	}
	// Each node row is "node-x  DELIVERED/S  INBOX"; some refresh must show deliveries.
	row := regexp.MustCompile(`(?m)^\s*(node-[abc])\s+(\d+)\s+\d+`)
	delivered := map[string]int{}
	for _, m := range row.FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[2])
		delivered[m[1]] = max(delivered[m[1]], n)
	}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		if delivered[node] == 0 {
			t.Errorf("%s never showed a delivered/s above 0:\n%s", node, text)
		}
	}
	if !strings.Contains(text, "demo stopped") {
		t.Error("the demo did not stop cleanly at the end of its duration")
	}
}
