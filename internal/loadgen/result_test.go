package loadgen

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// requiredFields are the JSON fields the issue promises for every run.
var requiredFields = []string{
	"submitted", "delivered", "delivered_per_sec", "submit_per_sec",
	"p50_us", "p99_us", "p999_us", "max_us", "overridden", "wire_events",
}

// spawnFields are present when the bench spawned the nodes.
var spawnFields = []string{"node_cpu_seconds", "node_peak_rss_bytes", "cpu_us_per_delivered"}

// hotKeyFields are present with --keys > 0.
var hotKeyFields = []string{"converge_ms", "converged"}

func decode(t *testing.T, r *Result) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.HasSuffix(buf.String(), "\n") {
		t.Fatalf("want exactly one line, got %q", buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestJSONShape(t *testing.T) {
	ms, yes := 12.5, true
	for _, tc := range []struct {
		name          string
		r             Result
		want, missing []string
	}{
		{
			name: "spawned, hot keys",
			r: Result{Spawned: true, Keys: 10, Submitted: 10, Delivered: 20, ConvergeMs: &ms, Converged: &yes,
				NodeCPUSeconds: 1.5, NodePeakRSSBytes: 1 << 20, CPUUsPerDelivered: 75000},
			want: append(append(append([]string{}, requiredFields...), spawnFields...), hotKeyFields...),
		},
		{
			name:    "app-addrs, unique keys",
			r:       Result{Submitted: 10},
			want:    requiredFields,
			missing: append(append([]string{}, spawnFields...), hotKeyFields...),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := decode(t, &tc.r)
			for _, f := range tc.want {
				if _, ok := m[f]; !ok {
					t.Errorf("field %q missing from %v", f, m)
				}
			}
			for _, f := range tc.missing {
				if _, ok := m[f]; ok {
					t.Errorf("field %q present, want it omitted", f)
				}
			}
		})
	}
}

func TestJSONLatencyIsFlat(t *testing.T) {
	m := decode(t, &Result{Latency: Latency{P50: 1, P99: 2, P999: 3, Max: 4}})
	if m["p50_us"] != 1.0 || m["p99_us"] != 2.0 || m["p999_us"] != 3.0 || m["max_us"] != 4.0 {
		t.Fatalf("latency fields: %v", m)
	}
}

func TestWriteTable(t *testing.T) {
	ms, yes, no := 3.25, true, false
	r := Result{
		Nodes: 3, Publishers: 1, Subscribers: 2, Rate: 1000, Batch: 10, Payload: 100, Keys: 5, DurationSec: 2, WarmupSec: 1,
		Submitted: 2000, Delivered: 4000, Latency: Latency{P50: 450, P99: 2500, Max: 1_500_000}, LatencyFrom: "payload",
		ConvergeMs: &ms, Converged: &yes,
		SubscriberResults: []SubscriberResult{{Addr: "127.0.0.1:1", NodeID: "bench-1", Delivered: 2000}},
		NodeResults:       []NodeResult{{NodeID: "bench-0", CPUSeconds: 1}},
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 nodes", "5 hot keys", "bench-1", "450µs", "2.50ms", "1.50s", "converged", "3.2 ms", "node bench-0"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
	r.Converged, r.ConvergeMs = &no, nil
	buf.Reset()
	r.WriteTable(&buf)
	if !strings.Contains(buf.String(), "NOT converged") {
		t.Errorf("table of an unconverged run:\n%s", buf.String())
	}
}
