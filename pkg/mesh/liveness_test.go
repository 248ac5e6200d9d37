package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestPeerLiveness: a peer that stops answering is down in GetStatus, in
// fanout_peer_up and in the readiness reason from the first call that cannot reach
// it; once a call is answered again it is up, and its last error says it recovered.
func TestPeerLiveness(t *testing.T) {
	fake := peers.NewFakeNetwork()
	a := fakeMember(t, fake, "a", "a:1", []string{"b:1"}, nil)
	b := fakeMember(t, fake, "b", "b:1", []string{"a:1"}, nil)
	ctx := context.Background()
	write := func(key string) {
		t.Helper()
		if _, err := a.submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev(key, "x")}}); err != nil {
			t.Fatal(err)
		}
	}
	row := func() *fanoutv1.PeerStatus { return a.mesh.Peers()[0] }
	up := func() float64 {
		return testutil.ToFloat64(gaugeOf(t, a.node, "fanout_peer_up"))
	}
	write("k1")
	poll(t, "b has k1", func() bool { return has(b, "k1") })
	if r := row(); !r.GetUp() || r.GetUpChangedAt() != nil || r.GetLastError() != nil {
		t.Fatalf("b answering: up %t, changed %v, last error %v; want up, never changed, no error", r.GetUp(), r.GetUpChangedAt(), r.GetLastError())
	}

	fake.Handle("b:1", nil) // b stops answering
	write("k2")
	poll(t, "b down", func() bool { return !row().GetUp() })
	if r := row(); r.GetUpChangedAt() == nil || r.GetLastError().GetClass() != "network" || r.GetLastError().GetRecoveredAt() != nil {
		t.Fatalf("b down: changed %v, last error %v; want a change time, a current network error", r.GetUpChangedAt(), r.GetLastError())
	}
	if v := up(); v != 0 {
		t.Fatalf("fanout_peer_up for b down: %v, want 0", v)
	}
	if ok, reason := a.node.Readiness(); !ok || !strings.Contains(reason, "0 of 1 peers up; down: b:1 (for ") {
		t.Fatalf("readiness with b down: %t, %q; want ready, saying b is down now", ok, reason)
	}

	fake.Handle("b:1", b.peer.Replicate)
	poll(t, "b has k2", func() bool { return has(b, "k2") })
	poll(t, "b up", func() bool { return row().GetUp() })
	if r := row(); r.GetLastError().GetRecoveredAt() == nil {
		t.Fatalf("b up again: last error %v, want it marked recovered", r.GetLastError())
	}
	if v := up(); v != 1 {
		t.Fatalf("fanout_peer_up for b up again: %v, want 1", v)
	}
	if ok, reason := a.node.Readiness(); !ok || !strings.Contains(reason, "ready: 1 of 1 peers up; at start: ") {
		t.Fatalf("readiness with b up: %t, %q; want ready, 1 of 1 up", ok, reason)
	}
}

// TestBootstrapAlone: a node whose only peer cannot be reached at start turns ready
// without it, and its readiness says so and why; fanout_bootstrap_peers counts it.
func TestBootstrapAlone(t *testing.T) {
	fake := peers.NewFakeNetwork()
	fake.HandleSync("z:1", unreachableSync{})
	a := fakeMember(t, fake, "a", "a:1", []string{"z:1"}, nil)
	select {
	case <-a.node.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("not ready within 10s with its only peer unreachable")
	}
	ok, reason := a.node.Readiness()
	if !ok || !strings.Contains(reason, "synced with 0 of 1 peers; unreachable: z:1 (not waited for: anti-entropy syncs with them once they answer)") {
		t.Fatalf("readiness: %t, %q; want ready, saying why without its peer", ok, reason)
	}
	if !strings.HasPrefix(reason, "ready: 0 of 1 peers up; down: z:1 (for ") {
		t.Fatalf("readiness: %q; want it to say z:1 is down now", reason)
	}
	got := map[string]float64{}
	for _, res := range []string{"synced", "unreachable", "failed"} {
		got[res] = bootstrapPeers(t, a, res)
	}
	if got["synced"] != 0 || got["unreachable"] != 1 || got["failed"] != 0 {
		t.Fatalf("fanout_bootstrap_peers: %v, want unreachable 1, the rest 0", got)
	}
}

// bootstrapPeers is fanout_bootstrap_peers{result} of m.
func bootstrapPeers(t *testing.T, m *member, result string) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 256)
	m.mesh.Collect(ch)
	close(ch)
	for metric := range ch {
		if !strings.Contains(metric.Desc().String(), `"fanout_bootstrap_peers"`) {
			continue
		}
		var pb dto.Metric
		if err := metric.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if pb.GetLabel()[0].GetValue() == result {
			return pb.GetGauge().GetValue()
		}
	}
	t.Fatalf("no fanout_bootstrap_peers{result=%q}", result)
	return 0
}

// unreachableSync is an address whose anti-entropy calls cannot reach it.
type unreachableSync struct{}

func (unreachableSync) Digest(*fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	return nil, fmt.Errorf("%w: connection refused", peers.ErrNetwork)
}

func (unreachableSync) Pull(*fanoutv1.PullRequest, func(*fanoutv1.PullResponse) error) error {
	return fmt.Errorf("%w: connection refused", peers.ErrNetwork)
}

func (unreachableSync) Push(*fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	return nil, fmt.Errorf("%w: connection refused", peers.ErrNetwork)
}
