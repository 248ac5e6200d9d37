package fanout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/breaker"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	acked   = fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED
	pending = fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING
	failed  = fanoutv1.PeerAckState_PEER_ACK_STATE_FAILED
	dropped = fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED
)

func TestNeedFor(t *testing.T) {
	cases := []struct {
		p       fanoutv1.AckPolicy
		n, want int
	}{
		{fanoutv1.AckPolicy_ACK_POLICY_QUEUED, 3, 0},
		{fanoutv1.AckPolicy_ACK_POLICY_UNSPECIFIED, 3, 0},
		{fanoutv1.AckPolicy_ACK_POLICY_ONE, 3, 1},
		{fanoutv1.AckPolicy_ACK_POLICY_QUORUM, 1, 1},
		{fanoutv1.AckPolicy_ACK_POLICY_QUORUM, 2, 2},
		{fanoutv1.AckPolicy_ACK_POLICY_QUORUM, 3, 2},
		{fanoutv1.AckPolicy_ACK_POLICY_QUORUM, 4, 3},
		{fanoutv1.AckPolicy_ACK_POLICY_ALL, 3, 3},
		{fanoutv1.AckPolicy_ACK_POLICY_ALL, 0, 0},
		{fanoutv1.AckPolicy_ACK_POLICY_ONE, 0, 0},
	}
	for _, c := range cases {
		if got := needFor(c.p, c.n); got != c.want {
			t.Errorf("needFor(%s, %d) = %d, want %d", c.p, c.n, got, c.want)
		}
	}
}

// gatedPeer answers OK, but only once open is closed; it counts calls.
type gatedPeer struct {
	open  chan struct{}
	calls tally
}

func (g *gatedPeer) handle(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	g.calls.Add()
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return allItems(req, fanoutv1.ItemStatus_ITEM_STATUS_OK), nil
}

// ackCluster starts node "a" with peers named in handlers, each answered by its handler
// (nil: unreachable).
func ackCluster(t *testing.T, handlers map[string]peers.FakeHandler, tweak func(*nodeConfig)) *testNode {
	t.Helper()
	fake := peers.NewFakeNetwork()
	var addrs []string
	for _, p := range []string{"p1", "p2", "p3"} {
		if h, ok := handlers[p]; ok {
			addrs = append(addrs, p)
			fake.Handle(p, h)
		}
	}
	cfg := testConfig("a", addrs...)
	cfg.Mesh.Dial = func(addr string) (mesh.Conn, error) { return fake.Dial(addr), nil }
	if tweak != nil {
		tweak(&cfg)
	}
	return startTestNode(t, cfg)
}

func okPeer(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return allItems(req, fanoutv1.ItemStatus_ITEM_STATUS_OK), nil
}

func submitAck(t *testing.T, tn *testNode, p fanoutv1.AckPolicy, timeout time.Duration, events ...*fanoutv1.Event) *fanoutv1.SubmitResponse {
	t.Helper()
	req := &fanoutv1.SubmitRequest{Ack: p, Events: events}
	if timeout > 0 {
		req.AckTimeout = durationpb.New(timeout)
	}
	resp, err := tn.app.Submit(context.Background(), req)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return resp
}

func wantAcks(t *testing.T, resp *fanoutv1.SubmitResponse, satisfied bool, want map[string]fanoutv1.PeerAckState) {
	t.Helper()
	if resp.Satisfied != satisfied {
		t.Errorf("satisfied = %v, want %v (%v)", resp.Satisfied, satisfied, resp.PeerAcks)
	}
	if len(resp.PeerAcks) != len(want) {
		t.Fatalf("peer_acks = %v, want one per peer %v", resp.PeerAcks, want)
	}
	for _, a := range resp.PeerAcks {
		if a.State != want[a.Peer] {
			t.Errorf("peer %s: %s (%q), want %s", a.Peer, a.State, a.Detail, want[a.Peer])
		}
	}
}

func TestAckPolicies(t *testing.T) {
	all := fanoutv1.AckPolicy_ACK_POLICY_ALL
	t.Run("ALL with every peer up is satisfied", func(t *testing.T) {
		tn := ackCluster(t, map[string]peers.FakeHandler{"p1": okPeer, "p2": okPeer}, nil)
		resp := submitAck(t, tn, all, 0, ev("k1", ""), ev("k2", ""))
		wantAcks(t, resp, true, map[string]fanoutv1.PeerAckState{"p1": acked, "p2": acked})
	})
	t.Run("ALL with a dead peer times out naming it", func(t *testing.T) {
		tn := ackCluster(t, map[string]peers.FakeHandler{"p1": okPeer, "p2": nil}, nil)
		start := time.Now()
		resp := submitAck(t, tn, all, 100*time.Millisecond, ev("k", ""))
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Errorf("returned after %s, before the 100ms ack_timeout", waited)
		}
		wantAcks(t, resp, false, map[string]fanoutv1.PeerAckState{"p1": acked, "p2": pending})
		for _, a := range resp.PeerAcks {
			if a.Peer == "p2" && !strings.Contains(a.Detail, "ack_timeout") {
				t.Errorf("pending detail %q should say the timeout passed", a.Detail)
			}
		}
	})
	t.Run("ONE is satisfied by one live peer", func(t *testing.T) {
		tn := ackCluster(t, map[string]peers.FakeHandler{"p1": nil, "p2": okPeer, "p3": nil}, nil)
		resp := submitAck(t, tn, fanoutv1.AckPolicy_ACK_POLICY_ONE, 5*time.Second, ev("k", ""))
		wantAcks(t, resp, true, map[string]fanoutv1.PeerAckState{"p1": pending, "p2": acked, "p3": pending})
	})
	t.Run("QUORUM needs two of three", func(t *testing.T) {
		tn := ackCluster(t, map[string]peers.FakeHandler{"p1": okPeer, "p2": okPeer, "p3": nil}, nil)
		resp := submitAck(t, tn, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, 5*time.Second, ev("k", ""))
		if !resp.Satisfied {
			t.Fatalf("QUORUM with 2 of 3 up: %v", resp.PeerAcks)
		}
	})
	t.Run("a permanent error is FAILED and ends an ALL wait early", func(t *testing.T) {
		perm := func(context.Context, *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
			return nil, status.Error(codes.PermissionDenied, "no")
		}
		// With p1 unreachable, only p2's permanent error can end the wait before the
		// minute-long timeout: ALL can no longer be met once p2 has FAILED.
		tn := ackCluster(t, map[string]peers.FakeHandler{"p1": nil, "p2": perm}, nil)
		resp := submitAck(t, tn, all, time.Minute, ev("k", ""))
		wantAcks(t, resp, false, map[string]fanoutv1.PeerAckState{"p1": pending, "p2": failed})
	})
	t.Run("no peers: every policy is satisfied", func(t *testing.T) {
		tn := ackCluster(t, nil, nil)
		resp := submitAck(t, tn, all, 0, ev("k", ""))
		if !resp.Satisfied || len(resp.PeerAcks) != 0 {
			t.Fatalf("no peers: %v", resp)
		}
	})
}

func TestAckBreakerOpenFailsAtOnce(t *testing.T) {
	fb := &breaker.Fake{}
	fb.Set(breaker.Open, time.Hour)
	tn := ackCluster(t, map[string]peers.FakeHandler{"p1": okPeer}, func(c *nodeConfig) {
		c.Mesh.NewBreaker = func(breaker.Config) (breaker.Breaker, error) { return fb, nil }
	})
	resp := submitAck(t, tn, fanoutv1.AckPolicy_ACK_POLICY_ALL, time.Minute, ev("k", ""))
	wantAcks(t, resp, false, map[string]fanoutv1.PeerAckState{"p1": failed})
	if !strings.Contains(resp.PeerAcks[0].Detail, "breaker") {
		t.Errorf("detail %q should name the breaker", resp.PeerAcks[0].Detail)
	}
}

func TestAckDroppedOnOverflow(t *testing.T) {
	g := &gatedPeer{open: make(chan struct{})}
	tn := ackCluster(t, map[string]peers.FakeHandler{"p1": g.handle}, func(c *nodeConfig) {
		c.Mesh.Batcher.Workers = 1
		c.Mesh.Batcher.MaxBuffer = 1
		c.Mesh.Batcher.MaxBatch = 1
	})
	// "busy" occupies the only worker; then y is evicted by z from the 1-slot buffer.
	if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("busy", "")}}); err != nil {
		t.Fatal(err)
	}
	g.calls.Await(t, "the worker to be busy", 1)
	resp := submitAck(t, tn, fanoutv1.AckPolicy_ACK_POLICY_ALL, time.Minute, ev("y", ""), ev("z", ""))
	wantAcks(t, resp, false, map[string]fanoutv1.PeerAckState{"p1": dropped})
	if !strings.Contains(resp.PeerAcks[0].Detail, "overflow") {
		t.Errorf("detail %q should say overflow", resp.PeerAcks[0].Detail)
	}
	close(g.open)
}

// TestAckByReplacement: an event coalesced away by a newer version of its task is
// acknowledged when the newer one is.
func TestAckByReplacement(t *testing.T) {
	g := &gatedPeer{open: make(chan struct{})}
	var overridden tally // fates Overridden of k
	tn := ackCluster(t, map[string]peers.FakeHandler{"p1": g.handle}, func(c *nodeConfig) {
		c.Mesh.Batcher.Workers = 1
		c.onFate = func(_ string, t *batcher.Task[wire.Outgoing], f batcher.Fate) {
			if t.ID == "k" && f == batcher.FateOverridden {
				overridden.Add()
			}
		}
	})
	if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("hold", "")}}); err != nil {
		t.Fatal(err)
	}
	g.calls.Await(t, "the worker to be busy", 1)
	got := make(chan *fanoutv1.SubmitResponse, 1)
	go func() {
		resp, _ := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, Events: []*fanoutv1.Event{ev("k", "old")}})
		got <- resp
	}()
	// Pending is a batcher counter: no event says the acceptor took the old version.
	pollStats(t, "the old version to wait in pending", func() bool { return tn.node.purg.Watched() > 0 && peerStatus(tn).Pending == 1 })
	if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "new")}}); err != nil {
		t.Fatal(err)
	}
	overridden.Await(t, "the new version to replace it (the old one's fate Overridden)", 1)
	close(g.open)
	select {
	case resp := <-got:
		wantAcks(t, resp, true, map[string]fanoutv1.PeerAckState{"p1": acked})
	case <-time.After(waitTimeout):
		t.Fatalf("the replaced event was not acknowledged within %s", waitTimeout)
	}
}

func TestAckCancelledCallRemovesOperation(t *testing.T) {
	var conns connWatch
	tn := ackCluster(t, map[string]peers.FakeHandler{"p1": nil}, func(c *nodeConfig) { c.Mesh.Dial = conns.wrap(c.Mesh.Dial) })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(time.Hour), Events: []*fanoutv1.Event{ev("k", "")}})
		errc <- err
	}()
	// The operation is watched before its event is handed to p1's batcher, whose
	// worker then calls p1.
	waitOn(t, "the operation to be watched", conns.of("p1").calls.Changed, func() bool { return tn.node.purg.Watched() > 0 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) { // the edge's CANCELED
		t.Fatalf("cancelled Submit: %v, want CANCELED", err)
	}
	// The Submit cancels its operation (its watches, its timer) and unregisters its
	// waiters before it returns.
	if w, d, l := tn.node.purg.Watched(), tn.node.purg.Delayed(), tn.node.ledger.Waiting(); w != 0 || d != 0 || l != 0 {
		t.Fatalf("after the cancelled Submit returned: %d watched, %d delayed, %d waiting; want the operation, its timer and its waiters gone", w, d, l)
	}
}

func TestAckTimeoutCappedByCallDeadline(t *testing.T) {
	tn := ackCluster(t, map[string]peers.FakeHandler{"p1": nil}, nil)
	// The node keeps a tenth of it for its answer: 300ms, time enough on a loaded
	// machine (a 300ms deadline left 30ms, which a busy machine missed).
	const callDeadline = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	resp, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(time.Hour), Events: []*fanoutv1.Event{ev("k", "")}})
	if err != nil {
		t.Fatalf("Submit with a %v call deadline and a 1h ack_timeout: %v; want a response before the deadline", callDeadline, err)
	}
	wantAcks(t, resp, false, map[string]fanoutv1.PeerAckState{"p1": pending})
}

func TestSubmitStreamAcksInCompletionOrder(t *testing.T) {
	g := &gatedPeer{open: make(chan struct{})}
	tn := ackCluster(t, map[string]peers.FakeHandler{"p1": g.handle}, nil)
	stream, err := tn.app.SubmitStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Request 1 waits for an ack the gated peer holds back; request 2 is QUEUED and
	// must be answered first.
	stream.Send(&fanoutv1.SubmitRequest{RequestId: 1, Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, Events: []*fanoutv1.Event{ev("k1", "")}})
	stream.Send(&fanoutv1.SubmitRequest{RequestId: 2, Events: []*fanoutv1.Event{ev("k2", "")}})
	first, err := stream.Recv()
	if err != nil || first.RequestId != 2 {
		t.Fatalf("first response %v %v; want request 2 (request 1 is still waiting)", first, err)
	}
	close(g.open)
	second, err := stream.Recv()
	if err != nil || second.RequestId != 1 || !second.Satisfied {
		t.Fatalf("second response %v %v; want request 1 satisfied", second, err)
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err == nil {
		t.Fatal("stream did not end after CloseSend")
	}
}
