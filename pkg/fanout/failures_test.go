package fanout

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/breaker"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scriptedPeer answers Replicate calls from a script, one entry per call; after the
// script it answers OK for every item.
type scriptedPeer struct {
	mu     sync.Mutex
	script []func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error)
	calls  int   // guarded by mu
	called tally // counted as each call starts
}

func (p *scriptedPeer) handle(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	p.mu.Lock()
	i := p.calls
	p.calls++
	p.mu.Unlock()
	p.called.Add()
	if i < len(p.script) {
		return p.script[i](req)
	}
	return allItems(req, fanoutv1.ItemStatus_ITEM_STATUS_OK), nil
}

func (p *scriptedPeer) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func allItems(req *fanoutv1.ReplicateRequest, s fanoutv1.ItemStatus) *fanoutv1.ReplicateResponse {
	r := &fanoutv1.ReplicateResponse{NodeId: "p", Statuses: make([]fanoutv1.ItemStatus, len(req.Events))}
	for i := range r.Statuses {
		r.Statuses[i] = s
	}
	return r
}

func failWith(c codes.Code) func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		return nil, status.Error(c, "scripted")
	}
}

func answer(s fanoutv1.ItemStatus) func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return func(req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		return allItems(req, s), nil
	}
}

// nodeWithPeer starts node "a" whose only peer "p" is answered by handler.
func nodeWithPeer(t *testing.T, handler peers.FakeHandler, tweak func(*nodeConfig)) *testNode {
	t.Helper()
	fake := peers.NewFakeNetwork()
	fake.Handle("p", handler)
	cfg := testConfig("a", "p")
	cfg.Mesh.Dial = func(addr string) (mesh.Conn, error) { return fake.Dial(addr), nil }
	if tweak != nil {
		tweak(&cfg)
	}
	return startTestNode(t, cfg)
}

func peerStatus(tn *testNode) *fanoutv1.PeerStatus { return tn.node.Status().Peers[0] }

// TestFailureClassesAtTheEdge covers every row of the failure-class table (docs/ARCHITECTURE.md) and the per-item
// statuses: what is counted, whether the batch is retried, and whether the event
// finally arrives.
func TestFailureClassesAtTheEdge(t *testing.T) {
	type want struct {
		calls                                                        int // Replicate calls until the event's fate
		succeeded, congestion, transient, permanent, replayed, stale uint64
	}
	cases := []struct {
		name   string
		script []func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error)
		want   want
	}{
		{"OK", nil, want{calls: 1, succeeded: 1}},
		{"per-item STALE is done", script(answer(fanoutv1.ItemStatus_ITEM_STATUS_STALE)), want{calls: 1, stale: 1}},
		{"RESOURCE_EXHAUSTED is congestion, retried", script(failWith(codes.ResourceExhausted)), want{calls: 2, succeeded: 1, congestion: 1, replayed: 1}},
		{"DEADLINE_EXCEEDED is congestion, retried", script(failWith(codes.DeadlineExceeded)), want{calls: 2, succeeded: 1, congestion: 1, replayed: 1}},
		{"per-item BUSY is congestion, retried", script(answer(fanoutv1.ItemStatus_ITEM_STATUS_BUSY)), want{calls: 2, succeeded: 1, congestion: 1, replayed: 1}},
		{"UNAVAILABLE is a network failure, retried", script(failWith(codes.Unavailable)), want{calls: 2, succeeded: 1, transient: 1, replayed: 1}},
		{"INVALID_ARGUMENT is permanent, dropped", script(failWith(codes.InvalidArgument)), want{calls: 1, permanent: 1}},
		{"UNAUTHENTICATED is permanent, dropped", script(failWith(codes.Unauthenticated)), want{calls: 1, permanent: 1}},
		{"UNIMPLEMENTED is permanent, dropped", script(failWith(codes.Unimplemented)), want{calls: 1, permanent: 1}},
		{"per-item INVALID is dropped and counted", script(answer(fanoutv1.ItemStatus_ITEM_STATUS_INVALID)), want{calls: 1, permanent: 1}},
		{"a panicking peer fails the batch, not the worker", script(func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
			panic("peer blew up")
		}), want{calls: 1, permanent: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &scriptedPeer{script: c.script}
			tn := nodeWithPeer(t, p.handle, func(cfg *nodeConfig) { cfg.Mesh.Batcher.Workers = 1 })
			if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "")}}); err != nil {
				t.Fatal(err)
			}
			drained(t, tn, "the event's fate", func() bool {
				st := peerStatus(tn)
				return st.Succeeded+st.Stale+st.Permanent == 1 && st.Pending == 0 && st.InFlight == 0
			})
			st := peerStatus(tn)
			got := want{p.callCount(), st.Succeeded, st.Congestion, st.Transient, st.Permanent, st.Replayed, st.Stale}
			if got != c.want {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
			// The single worker lives on: a second event is still sent.
			if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k2", "")}}); err != nil {
				t.Fatal(err)
			}
			waitOn(t, "a later event to be sent by the same worker", p.called.Changed, func() bool { return p.callCount() > c.want.calls })
		})
	}
}

func script(fs ...func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error)) []func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return fs
}

// TestBreakerOpenHoldsEvents: with the breaker open nothing is sent; events wait in
// pending and coalesce; when it closes, only the latest version goes out.
func TestBreakerOpenHoldsEvents(t *testing.T) {
	fb := &breaker.Fake{}
	fb.Set(breaker.Open, time.Millisecond)
	p := &scriptedPeer{}
	tn := nodeWithPeer(t, p.handle, func(cfg *nodeConfig) {
		cfg.Mesh.NewBreaker = func(breaker.Config) (breaker.Breaker, error) { return fb, nil }
	})
	for i := range 5 {
		if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", string(rune('0'+i)))}}); err != nil {
			t.Fatal(err)
		}
	}
	// The breaker holds the event: the batcher does not empty, and its counters have
	// no event (the four fates Overridden come a step before Accepted is published).
	pollStats(t, "all five accepted", func() bool { return peerStatus(tn).Accepted == 5 })
	st := peerStatus(tn)
	if st.Breaker != "open" || st.Pending != 1 || st.Overridden != 4 || p.callCount() != 0 {
		t.Fatalf("while open: breaker %s pending %d overridden %d calls %d; want open, 1 pending, 4 coalesced, no calls",
			st.Breaker, st.Pending, st.Overridden, p.callCount())
	}
	fb.Set(breaker.Closed, 0)
	drained(t, tn, "delivery after close", func() bool { return peerStatus(tn).Succeeded == 1 })
	if calls, refused, _ := fb.Counts(); calls != 1 || refused != 0 || p.callCount() != 1 {
		t.Fatalf("calls %d refused %d peer calls %d; want the latest version sent once", calls, refused, p.callCount())
	}
}

// TestBreakerTransitionsInStatus uses the real breaker: a dead peer trips it (visible
// in GetStatus), and once the peer is back a probe closes it and the events arrive.
func TestBreakerTransitionsInStatus(t *testing.T) {
	var mu sync.Mutex
	down := true
	refusedCalls := 0 // calls the dead peer answered UNAVAILABLE; guarded by mu
	handler := func(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			refusedCalls++
			return nil, status.Error(codes.Unavailable, "down")
		}
		return allItems(req, fanoutv1.ItemStatus_ITEM_STATUS_OK), nil
	}
	var changes tally // the breaker's transitions
	tn := nodeWithPeer(t, handler, func(cfg *nodeConfig) {
		cfg.Mesh.Breaker.OpenFor = 50 * time.Millisecond
		cfg.Mesh.NewBreaker = func(c breaker.Config) (breaker.Breaker, error) { // the real one, its transitions told
			logged := c.OnStateChange
			c.OnStateChange = func(name string, from, to breaker.State) {
				logged(name, from, to)
				changes.Add()
			}
			return breaker.New(c)
		}
	})
	if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "")}}); err != nil {
		t.Fatal(err)
	}
	breakerIs := func(want string) func() bool {
		return func() bool {
			st, err := tn.app.GetStatus(context.Background(), &fanoutv1.GetStatusRequest{})
			return err == nil && st.Peers[0].Breaker == want
		}
	}
	waitOn(t, "breaker open after 5 network failures", changes.Changed, breakerIs("open"))
	// The peer's own count of failed calls moves in step with the breaker (both happen
	// inside the worker's call); the batcher's transient counter lags them by one
	// acceptor step and also counts the calls refused while open.
	mu.Lock()
	if refusedCalls < 5 {
		t.Fatalf("breaker open after %d network failures, want >= 5 before tripping", refusedCalls)
	}
	down = false
	mu.Unlock()
	waitOn(t, "probe closes the breaker", changes.Changed, breakerIs("closed"))
	drained(t, tn, "probe closes the breaker and the event arrives", func() bool {
		return breakerIs("closed")() && peerStatus(tn).Succeeded == 1
	})
}

// TestPeerLastError: a failed Replicate shows in GetStatus as the peer's last error,
// with its class and message, and is logged; a later failure of another class
// replaces it.
func TestPeerLastError(t *testing.T) {
	p := &scriptedPeer{script: script(failWith(codes.Unavailable), failWith(codes.InvalidArgument))}
	logs := &syncWriter{}
	tn := nodeWithPeer(t, p.handle, func(cfg *nodeConfig) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	if st := peerStatus(tn); st.GetLastError() != nil {
		t.Fatalf("last error before any call: %v", st.GetLastError())
	}
	if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "v")}}); err != nil {
		t.Fatal(err)
	}
	p.called.Await(t, "the network failure, then the permanent one", 2)
	// Recorded before the batch's result: the event, dropped, empties the batcher.
	drained(t, tn, "the permanent failure recorded", func() bool { return peerStatus(tn).GetLastError().GetClass() == "permanent" })
	e := peerStatus(tn).GetLastError()
	if !strings.Contains(e.GetMessage(), "scripted") || e.GetAt() == nil {
		t.Fatalf("last error %v; want the peer's message and a time", e)
	}
	for _, want := range []string{`class=network`, `class=permanent`, "replicate to peer failed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// syncWriter is a log buffer that slog handlers on several goroutines may write to
// while the test reads it; writes counts the lines written, for a test to wait on.
type syncWriter struct {
	mu     sync.Mutex
	b      strings.Builder
	writes tally
}

func (s *syncWriter) Write(p []byte) (int, error) {
	defer s.writes.Add()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
