package fanout

import (
	"context"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// brokerTransport is an in-memory Transport that is not the mesh: it has fixed
// destinations (as a broker's replicas would be), queues what Publish hands it, and
// reports fates only when the test says. It shows what another transport implements,
// and that the node needs nothing else of it.
type brokerTransport struct {
	dests []string
	down  []string // nil: every destination can acknowledge
	fate  func(dest string, t *batcher.Task[wire.Outgoing], f batcher.Fate)
	ready chan struct{}

	mu        sync.Mutex
	published [][]batcher.Task[wire.Outgoing] // guarded by mu: one slice per Publish
	tracked   chan struct{}                   // closed at the first track
}

func newBrokerTransport(n *Node, dests ...string) *brokerTransport {
	return &brokerTransport{dests: dests, fate: n.AckFates(), ready: make(chan struct{}), tracked: make(chan struct{})}
}

func (b *brokerTransport) Destinations() int                        { return len(b.dests) }
func (b *brokerTransport) Admit(fanoutv1.AckPolicy, [][]byte) error { return nil }

func (b *brokerTransport) Publish(_ context.Context, events []batcher.Task[wire.Outgoing], track func(dests, down []string)) error {
	if track != nil {
		track(b.dests, b.down)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.published = append(b.published, events)
	if track != nil {
		select {
		case <-b.tracked:
		default:
			close(b.tracked)
		}
	}
	return nil
}

// settle reports fate at dest for every event published so far.
func (b *brokerTransport) settle(dest string, f batcher.Fate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, evs := range b.published {
		for i := range evs {
			b.fate(dest, &evs[i], f)
		}
	}
}

func (b *brokerTransport) Ready() <-chan struct{} { return b.ready }
func (b *brokerTransport) Readiness() (bool, string) {
	select {
	case <-b.ready:
		return true, "ready: caught up with the stream"
	default:
		return false, "reading the stream's snapshot"
	}
}
func (b *brokerTransport) Drain(context.Context) (int, uint64, uint64, error) {
	return len(b.dests), 0, 0, nil
}
func (b *brokerTransport) Status() *fanoutv1.TransportStatus {
	return &fanoutv1.TransportStatus{Kind: "broker"}
}
func (b *brokerTransport) Peers() []*fanoutv1.PeerStatus {
	out := make([]*fanoutv1.PeerStatus, len(b.dests))
	for i, d := range b.dests {
		out[i] = &fanoutv1.PeerStatus{Address: d}
	}
	return out
}
func (b *brokerTransport) Describe(chan<- *prometheus.Desc) {}
func (b *brokerTransport) Collect(chan<- prometheus.Metric) {}
func (b *brokerTransport) Close()                           {}

var _ Transport = (*brokerTransport)(nil)

// TestTransportSeam: a node on a transport that is not the mesh. Its snapshot comes
// through Apply and the node turns ready when the transport does; a Submit with ack
// QUORUM counts the transport's destinations, is told which cannot acknowledge
// before anything is queued, and completes from the fates the transport reports; a
// QUEUED Submit hands over the accepted events, with their bytes and versions.
func TestTransportSeam(t *testing.T) {
	var tr *brokerTransport
	cfg := testConfig("a")
	cfg.NewTransport = func(n *Node) (Transport, error) {
		tr = newBrokerTransport(n, "r1", "r2", "r3")
		tr.down = []string{"", "", "replica lagging"}
		return tr, nil
	}
	n, err := New(cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()

	// The snapshot, from the feed: Apply stores it; the node is not ready until the
	// transport is.
	raw, err := proto.Marshal(&fanoutv1.Event{TaskId: "from-stream", Version: wallVersion(time.Now())})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := n.Apply("stream", []*fanoutv1.SyncEntry{{Event: raw, Origin: "b", SubmittedAtUnixNanos: time.Now().UnixNano()}}); err != nil || got != 1 {
		t.Fatalf("Apply of the snapshot: %d applied, %v", got, err)
	}
	if ok, reason := n.Readiness(); ok || reason != "reading the stream's snapshot" {
		t.Fatalf("before the transport is ready: %t, %q", ok, reason)
	}
	close(tr.ready)
	<-n.Ready()
	if resp, err := n.Get(&fanoutv1.GetRequest{TaskIds: []string{"from-stream"}}); err != nil || len(resp.GetEntries()) != 1 ||
		resp.GetEntries()[0].GetOriginNode() != "b" {
		t.Fatalf("Get of the applied entry: %v, %v", resp, err)
	}

	// QUORUM of 3: 2 acknowledgements; r3 cannot acknowledge (down), r1 acks, r2
	// drops.
	type result struct {
		resp *fanoutv1.SubmitResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "v")},
			Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM, AckTimeout: durationpb.New(time.Minute)})
		done <- result{resp, err}
	}()
	<-tr.tracked // the waiters are registered: fates reported now are counted
	tr.settle("r1", batcher.FateSucceeded)
	tr.settle("r2", batcher.FateOverflow)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := map[string]fanoutv1.PeerAckState{
		"r1": fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED,
		"r2": fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED,
		"r3": fanoutv1.PeerAckState_PEER_ACK_STATE_FAILED,
	}
	if r.resp.GetSatisfied() || len(r.resp.GetPeerAcks()) != 3 {
		t.Fatalf("QUORUM with 1 of 3 acked: %v, want unsatisfied, 3 destinations", r.resp)
	}
	for _, pa := range r.resp.GetPeerAcks() {
		if pa.GetState() != want[pa.GetPeer()] {
			t.Errorf("destination %s: %v, want %v", pa.GetPeer(), pa.GetState(), want[pa.GetPeer()])
		}
	}

	// QUEUED: the event as stored, its version appended, handed over once.
	resp, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("q", "v")}})
	if err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	last := tr.published[len(tr.published)-1]
	tr.mu.Unlock()
	var got fanoutv1.Event
	if len(last) != 1 || proto.Unmarshal(last[0].Value.Raw, &got) != nil || got.GetTaskId() != "q" ||
		got.GetVersion() != resp.GetVersions()[0] || last[0].Value.Version != got.GetVersion() || last[0].ID != "q" {
		t.Fatalf("published %+v (%v), want q at version %d", last, &got, resp.GetVersions()[0])
	}
	if st := n.Status(); len(st.GetPeers()) != 3 || st.GetPeers()[0].GetAddress() != "r1" {
		t.Errorf("GetStatus peers %v, want the transport's three rows", st.GetPeers())
	}
}
