package fanout

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/promhist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCollectorLintAndCounts: the collector's metrics pass client_golang's linter (the
// checks of promtool check metrics) and count what two nodes did.
func TestCollectorLintAndCounts(t *testing.T) {
	nodes := cluster(t, []string{"a", "b"}, nil)
	a, b := nodes["a"], nodes["b"]
	resp, err := a.app.Submit(context.Background(), &fanoutv1.SubmitRequest{
		Ack:    fanoutv1.AckPolicy_ACK_POLICY_ALL,
		Events: []*fanoutv1.Event{ev("k1", "x"), ev("k2", "y")},
	})
	if err != nil || !resp.GetSatisfied() {
		t.Fatalf("Submit ALL: %v, %v", resp, err)
	}
	ca, cb := NewCollector(a.node), NewCollector(b.node)
	for name, c := range map[string]prometheus.Collector{"a": ca, "b": cb} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("node %s: lint: %s: %s", name, p.Metric, p.Text)
		}
	}
	want := `
# HELP fanout_submitted_events_total Events the local app submitted, by outcome: accepted, stale (the node held a newer version), refused (the state table is full).
# TYPE fanout_submitted_events_total counter
fanout_submitted_events_total{outcome="accepted"} 2
fanout_submitted_events_total{outcome="refused"} 0
fanout_submitted_events_total{outcome="stale"} 0
`
	if err := testutil.CollectAndCompare(ca, strings.NewReader(want), "fanout_submitted_events_total"); err != nil {
		t.Error(err)
	}
	if got := testutil.CollectAndCount(ca, "fanout_ack_wait_seconds"); got != 6 {
		t.Errorf("fanout_ack_wait_seconds: %d series, want 6 (3 policies × satisfied)", got)
	}
	if got := a.node.ackWait.h[fanoutv1.AckPolicy_ACK_POLICY_ALL][1]; testutil.CollectAndCount(got) != 1 {
		t.Error("no ack wait histogram for ALL, satisfied")
	}
	// ALL was satisfied: b answered both events, and a Replicate counts what it
	// received before it answers.
	if got := b.node.received.of("a").outcomes[recvOK].Load(); got != 2 {
		t.Fatalf("b received %d events from a once a's ack ALL was satisfied, want both", got)
	}
	out := collectText(t, cb)
	for _, s := range []string{
		`fanout_received_events_total{origin="a",outcome="ok"} 2`,
		`fanout_receive_lag_seconds_count{origin="a"} 2`,
	} {
		if !strings.Contains(out, s) {
			t.Errorf("node b's metrics lack %q:\n%s", s, out)
		}
	}
	// The revision is exact: base (a label, every digit) plus an integer count of
	// changes, equal to what GetStatus says.
	rev := a.node.Status().GetState().GetRevision()
	wantRev := fmt.Sprintf(`
# HELP fanout_state_revision_base_info %s
# TYPE fanout_state_revision_base_info gauge
fanout_state_revision_base_info{base="%d"} 1
# HELP fanout_state_revisions_total %s
# TYPE fanout_state_revisions_total counter
fanout_state_revisions_total 2
`, helpOf(t, ca, "fanout_state_revision_base_info"), rev-2, helpOf(t, ca, "fanout_state_revisions_total"))
	if err := testutil.CollectAndCompare(ca, strings.NewReader(wantRev), "fanout_state_revision_base_info", "fanout_state_revisions_total"); err != nil {
		t.Errorf("GetStatus revision %d: %v", rev, err)
	}
	if out := collectText(t, ca); !strings.Contains(out, `fanout_peer_replicate_duration_seconds_count{peer="b",peer_id="b"}`) {
		t.Errorf("node a's metrics lack the Replicate histogram of peer b with its node id:\n%s", out)
	}
}

// helpOf is the help text of c's metric name.
func helpOf(t *testing.T, c prometheus.Collector, name string) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetHelp()
		}
	}
	t.Fatalf("no metric %s", name)
	return ""
}

// collectText renders c's metrics in the text format.
func collectText(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			switch {
			case m.GetHistogram() != nil:
				fmt.Fprintf(&b, "%s_count{%s} %d\n", f.GetName(), strings.Join(labels, ","), m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				fmt.Fprintf(&b, "%s{%s} %v\n", f.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue())
			}
		}
	}
	return b.String()
}

// TestReceivedStatsBoundsOrigins: past maxOriginSeries origins, the rest share the
// otherOrigin counters, so a peer cannot grow the series without bound.
func TestReceivedStatsBoundsOrigins(t *testing.T) {
	var r receivedStats
	for i := range maxOriginSeries + 10 {
		r.of(fmt.Sprintf("node-%d", i)).outcomes[recvOK].Add(1)
	}
	m := r.snapshot()
	if len(m) != maxOriginSeries+1 {
		t.Fatalf("%d origins kept, want %d and the shared one", len(m), maxOriginSeries)
	}
	if got := m[otherOrigin].outcomes[recvOK].Load(); got != 10 {
		t.Errorf("the origins past the bound counted %d events, want 10", got)
	}
	if r.of("node-0") != m["node-0"] || r.of("node-999") != m[otherOrigin] {
		t.Error("a known origin or one past the bound got new counters")
	}
}

// BenchmarkObserve is what the metrics add on the hot paths (docs/BENCHMARKS.md):
// at the receiver, per request of 10 events, the origin's counters, a count by
// outcome per event added once, and a lag observation per event, on two goroutines
// at once (two Replicate calls in parallel); per Replicate call a histogram
// observation.
func BenchmarkObserve(b *testing.B) {
	b.Run("received-10-events", func(b *testing.B) {
		var r receivedStats
		now := time.Now()
		sub := now.Add(-3 * time.Millisecond).UnixNano()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				o := r.of("origin-a")
				var counts [recvOutcomes]uint64
				for range 10 {
					counts[recvOK]++
					o.observeLag(now, sub)
				}
				o.add(&counts)
			}
		})
	})
	b.Run("replicate-call", func(b *testing.B) {
		h := promhist.New(promhist.LatencyBuckets())
		for b.Loop() {
			start := time.Now()
			h.Observe(time.Since(start).Seconds())
		}
	})
}
