package mesh

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/fakeclock"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestPeerSetChanges: SetPeers adds a peer at once (it gets new events and an
// anti-entropy round brings it the older ones), removes one after its grace with
// its pending events dropped, ack waiters settled and its series gone, takes back a
// peer named again within the grace with nothing dropped, and never re-adds an
// address found to be the node itself.
func TestPeerSetChanges(t *testing.T) {
	fake := peers.NewFakeNetwork()
	const grace = 300 * time.Millisecond
	clock := fakeclock.New() // the removal graces end when the test says
	isGrace := fakeclock.Exactly(grace)
	var logs logLines  // a's log: a removed link is logged after it is closed and counted
	var callsToC tally // a's Replicate calls to c
	a := fakeMember(t, fake, "a", "a", []string{"b"}, func(c *nodeConfig) {
		c.PeerRemovalGrace, c.After, c.Logger = grace, clock.After, logs.logger()
		dial := c.Dial
		c.Dial = func(addr string) (Conn, error) {
			conn, err := dial(addr)
			if err != nil || addr != "c" {
				return conn, err
			}
			return callCounted{conn, &callsToC}, nil
		}
	})
	b := fakeMember(t, fake, "b", "b", nil, nil)
	c := fakeMember(t, fake, "c", "c", nil, nil)
	ctx := context.Background()
	submit := func(key string, ack fanoutv1.AckPolicy) *fanoutv1.SubmitResponse {
		t.Helper()
		resp, err := a.submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev(key, "x")}, Ack: ack,
			AckTimeout: durationpb.New(5 * time.Second)})
		if err != nil {
			t.Fatalf("Submit %s: %v", key, err)
		}
		return resp
	}
	submit("old", fanoutv1.AckPolicy_ACK_POLICY_ALL)

	// Added: c gets new events at once; "old", sent before c was a peer, comes by
	// the round a new peer gets. Duplicates in the list are one peer.
	if err := a.mesh.SetPeers([]string{"b", "c", "b"}); err != nil {
		t.Fatal(err)
	}
	if n := len(a.node.Status().GetPeers()); n != 2 {
		t.Fatalf("peers after adding c: %d, want 2", n)
	}
	if resp := submit("new", fanoutv1.AckPolicy_ACK_POLICY_ALL); !resp.GetSatisfied() {
		t.Fatalf("ack ALL with c added: %v", resp)
	}
	if !has(c, "new") {
		t.Fatal("c, just added, does not hold the event submitted after")
	}
	// The fake network carries Replicate only; anti-entropy is checked end to end.
	if got := a.mesh.members.added.Load(); got != 1 {
		t.Fatalf("added = %d, want 1", got)
	}

	// Removed with events pending (c unreachable): within the grace it is still
	// shown (removing) and gets no new events; after it, the pending one is dropped.
	fake.Handle("c", nil)
	type result struct {
		resp *fanoutv1.SubmitResponse
		err  error
	}
	waitedCh := make(chan result, 1)
	go func() {
		resp, err := a.submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("stuck", "x")},
			Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(20 * time.Second)})
		waitedCh <- result{resp, err}
	}()
	// c's batcher has taken "stuck" (its second event; the first, "new", was acked):
	// its worker calls c a second time. Its queue gauges cannot tell: they are
	// published a step late and may still show "new" in flight.
	callsToC.Await(t, "c's batcher to take the event", 2)
	if err := a.mesh.SetPeers([]string{"b"}); err != nil {
		t.Fatal(err)
	}
	if p := peerByAddr(a.node.Status(), "c"); p == nil || !p.GetRemoving() {
		t.Fatalf("c during its grace: %v, want shown with removing", p)
	}
	submit("after-removal", fanoutv1.AckPolicy_ACK_POLICY_QUEUED)
	clock.Fire(t, "c's removal grace", isGrace)
	r := <-waitedCh
	if r.err != nil {
		t.Fatalf("Submit stuck: %v", r.err)
	}
	waited := r.resp
	ackOf := func(r *fanoutv1.SubmitResponse, peer string) *fanoutv1.PeerAck {
		for _, pa := range r.GetPeerAcks() {
			if pa.GetPeer() == peer {
				return pa
			}
		}
		return nil
	}
	if pa := ackOf(waited, "c"); pa.GetState() != fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED || !strings.Contains(pa.GetDetail(), "peer removed") {
		t.Fatalf("ack ALL waiting for removed c: %v, want DROPPED peer removed", pa)
	}
	// The link leaves the status as its grace ends, just before it is closed and what
	// it dropped is counted (startLeaving), then logged: wait for the count, then
	// check it.
	waitOn(t, "c's link to close", logs.lines.Changed, func() bool { return peerByAddr(a.node.Status(), "c") == nil })
	waitOn(t, "c's drops to be counted", logs.lines.Changed, func() bool { return a.mesh.members.dropped.Load() > 0 })
	if got := a.mesh.members.dropped.Load(); got != 1 {
		t.Fatalf("dropped for removed peers = %d, want 1 (stuck)", got)
	}
	if n := seriesOf(t, a.node, "c"); n != 0 {
		t.Fatalf("%d series still name removed peer c", n)
	}
	if has(c, "after-removal") {
		t.Fatal("c got an event submitted after it was removed")
	}

	// Removed and named again within the grace: back as it was, nothing dropped.
	if err := a.mesh.SetPeers([]string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	submit("flap", fanoutv1.AckPolicy_ACK_POLICY_QUEUED)
	if err := a.mesh.SetPeers([]string{"b"}); err != nil {
		t.Fatal(err)
	}
	if err := a.mesh.SetPeers([]string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	if got := a.mesh.members.returned.Load(); got != 1 {
		t.Fatalf("returned = %d, want 1", got)
	}
	fake.Handle("c", c.peer.Replicate)
	waitKey(t, c, "flap")                                  // the event queued before c flapped
	clock.Fire(t, "the grace c came back within", isGrace) // a grace that was not cancelled would close the link now
	if p := peerByAddr(a.node.Status(), "c"); p == nil || p.GetRemoving() {
		t.Fatalf("c after coming back: %v, want in the set", p)
	}
	if got := a.mesh.members.dropped.Load(); got != 1 {
		t.Fatalf("dropped = %d after the flap, want still 1", got)
	}

	// This node's own address: dropped once found, never added again.
	if err := a.mesh.SetPeers([]string{"b", "c", "a"}); err != nil {
		t.Fatal(err)
	}
	submit("self", fanoutv1.AckPolicy_ACK_POLICY_QUEUED)
	// Logged once it has left the set, before it is closed.
	waitOn(t, "the self link to be dropped", logs.lines.Changed, func() bool { return peerByAddr(a.node.Status(), "a") == nil })
	if err := a.mesh.SetPeers([]string{"b", "c", "a"}); err != nil {
		t.Fatal(err)
	}
	if p := peerByAddr(a.node.Status(), "a"); p != nil {
		t.Fatalf("this node's own address was added again: %v", p)
	}
	_ = b
}

// TestNodeIDConflict: a process with this node's id at another address is a
// conflict (events to it fail permanently, never acked; status and metrics say so), not a
// self-address to drop; a third node sees the two answer with one id and says so too.
func TestNodeIDConflict(t *testing.T) {
	fake := peers.NewFakeNetwork()
	a := fakeMember(t, fake, "a", "a1", []string{"a2"}, nil)
	fakeMember(t, fake, "a", "a2", nil, nil) // the twin: same id, another process
	c := fakeMember(t, fake, "c", "c", []string{"a1", "a2"}, nil)
	ctx := context.Background()

	resp, err := a.submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "x")},
		Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetSatisfied() || resp.GetPeerAcks()[0].GetState() != fanoutv1.PeerAckState_PEER_ACK_STATE_FAILED {
		t.Fatalf("ack ALL to a twin: %v, want unsatisfied, FAILED (never ACKED)", resp)
	}
	p := peerByAddr(a.node.Status(), "a2")
	if p == nil || !strings.Contains(p.GetNodeIdConflict(), "this node's own id") || !strings.Contains(p.GetLastError().GetMessage(), "node id conflict") {
		t.Fatalf("a's status of its twin: %v, want kept, with the conflict and last_error", p)
	}
	if v := testutil.ToFloat64(gaugeOf(t, a.node, "fanout_peer_node_id_conflict")); v != 1 {
		t.Fatalf("fanout_peer_node_id_conflict = %v, want 1", v)
	}

	if _, err := c.submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k2", "x")}}); err != nil {
		t.Fatal(err)
	}
	// c's links learn the ids from the answers, before the batch's result.
	drained(t, c, "c to see one id at two addresses", func() bool {
		st := c.node.Status()
		p1, p2 := peerByAddr(st, "a1"), peerByAddr(st, "a2")
		return p1 != nil && p2 != nil && strings.Contains(p1.GetNodeIdConflict(), "also answers from a2") &&
			strings.Contains(p2.GetNodeIdConflict(), "also answers from a1")
	})
}

// gaugeOf returns a collector of only the named metric of n, for testutil.ToFloat64.
func gaugeOf(t *testing.T, n *fanout.Node, name string) prometheus.Collector {
	t.Helper()
	return filtered{fanout.NewCollector(n), name}
}

type filtered struct {
	c    prometheus.Collector
	name string
}

func (f filtered) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(f, ch) }
func (f filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { f.c.Collect(all); close(all) }()
	for m := range all {
		if strings.Contains(m.Desc().String(), `"`+f.name+`"`) {
			ch <- m
		}
	}
}

// TestUnknownCaller: a peer not in the set that calls the node triggers
// OnUnknownPeer (so DNS is refreshed at once), at most once a second; known peers and
// the node itself never do.
func TestUnknownCaller(t *testing.T) {
	fake := peers.NewFakeNetwork()
	var mu sync.Mutex
	var calls []string
	b := fakeMember(t, fake, "b", "b", []string{"k"}, func(c *nodeConfig) {
		c.OnUnknownPeer = func(id string) { mu.Lock(); calls = append(calls, id); mu.Unlock() }
	})
	fakeMember(t, fake, "k", "k", []string{"b"}, nil)
	req := func(origin string) {
		if _, err := b.peer.Replicate(context.Background(), &fanoutv1.ReplicateRequest{OriginNode: origin,
			Events: []*fanoutv1.Event{{TaskId: "t-" + origin, Version: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	// b learns k's id from k's first answer.
	if _, err := b.submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("x", "")}}); err != nil {
		t.Fatal(err)
	}
	drained(t, b, "b to learn k's id", func() bool { return peerByAddr(b.node.Status(), "k").GetNodeId() == "k" })
	req("k")
	req("b")
	req("new")
	req("new")
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 || calls[0] != "new" {
		t.Fatalf("OnUnknownPeer calls %v, want [new] (known, self and a repeat within a second make none)", calls)
	}
}
