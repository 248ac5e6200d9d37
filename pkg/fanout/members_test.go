package fanout

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fakeMember starts a node with id on fake at addr, peered with peerAddrs.
func fakeMember(t *testing.T, fake *peers.FakeNetwork, id, addr string, peerAddrs []string, tweak func(*Config)) *testNode {
	t.Helper()
	cfg := testConfig(id, peerAddrs...)
	cfg.Dial = func(a string) (Replicator, error) { return fake.Dial(a), nil }
	if tweak != nil {
		tweak(&cfg)
	}
	tn := startTestNode(t, cfg)
	fake.Handle(addr, tn.peer.Replicate)
	return tn
}

func peerByAddr(st *fanoutv1.GetStatusResponse, addr string) *fanoutv1.PeerStatus {
	for _, p := range st.GetPeers() {
		if p.GetAddress() == addr {
			return p
		}
	}
	return nil
}

func has(tn *testNode, key string) bool {
	_, ok := tn.node.table.Get([]byte(key))
	return ok
}

// seriesOf counts the collector's series that name peer addr.
func seriesOf(t *testing.T, n *Node, addr string) int {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(n))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "peer" && lp.GetValue() == addr {
					count++
				}
			}
		}
	}
	return count
}

// TestPeerSetChanges: SetPeers adds a peer at once (it gets new events and an
// anti-entropy round brings it the older ones), removes one after its grace with
// its pending events dropped, ack waiters settled and its series gone, takes back a
// peer named again within the grace with nothing dropped, and never re-adds an
// address found to be the node itself.
func TestPeerSetChanges(t *testing.T) {
	fake := peers.NewFakeNetwork()
	const grace = 300 * time.Millisecond
	a := fakeMember(t, fake, "a", "a", []string{"b"}, func(c *Config) { c.PeerRemovalGrace = grace })
	b := fakeMember(t, fake, "b", "b", nil, nil)
	c := fakeMember(t, fake, "c", "c", nil, nil)
	ctx := context.Background()
	submit := func(key string, ack fanoutv1.AckPolicy) *fanoutv1.SubmitResponse {
		t.Helper()
		resp, err := a.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev(key, "x")}, Ack: ack,
			AckTimeout: durationpb.New(5 * time.Second)})
		if err != nil {
			t.Fatalf("Submit %s: %v", key, err)
		}
		return resp
	}
	submit("old", fanoutv1.AckPolicy_ACK_POLICY_ALL)

	// Added: c gets new events at once; "old", sent before c was a peer, comes by
	// the round a new peer gets. Duplicates in the list are one peer.
	if err := a.node.SetPeers([]string{"b", "c", "b"}); err != nil {
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
	if got := a.node.members.added.Load(); got != 1 {
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
		resp, err := a.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("stuck", "x")},
			Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(20 * time.Second)})
		waitedCh <- result{resp, err}
	}()
	// c's batcher has taken "stuck" (its second event; the first, "new", was acked).
	// Its queue gauges cannot tell: they are published a step late and may still show
	// "new" in flight.
	waitFor(t, "c's batcher to take the event", func() bool {
		p := peerByAddr(a.node.Status(), "c")
		return p != nil && p.GetAccepted() >= 2
	})
	if err := a.node.SetPeers([]string{"b"}); err != nil {
		t.Fatal(err)
	}
	if p := peerByAddr(a.node.Status(), "c"); p == nil || !p.GetRemoving() {
		t.Fatalf("c during its grace: %v, want shown with removing", p)
	}
	submit("after-removal", fanoutv1.AckPolicy_ACK_POLICY_QUEUED)
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
	waitFor(t, "c's link to close", func() bool { return peerByAddr(a.node.Status(), "c") == nil })
	// The link leaves the status as its grace ends, just before it is closed and what
	// it dropped is counted (startLeaving): wait for the count, then check it.
	waitFor(t, "c's drops to be counted", func() bool { return a.node.members.dropped.Load() > 0 })
	if got := a.node.members.dropped.Load(); got != 1 {
		t.Fatalf("dropped for removed peers = %d, want 1 (stuck)", got)
	}
	if n := seriesOf(t, a.node, "c"); n != 0 {
		t.Fatalf("%d series still name removed peer c", n)
	}
	if has(c, "after-removal") {
		t.Fatal("c got an event submitted after it was removed")
	}

	// Removed and named again within the grace: back as it was, nothing dropped.
	if err := a.node.SetPeers([]string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	submit("flap", fanoutv1.AckPolicy_ACK_POLICY_QUEUED)
	if err := a.node.SetPeers([]string{"b"}); err != nil {
		t.Fatal(err)
	}
	if err := a.node.SetPeers([]string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	if got := a.node.members.returned.Load(); got != 1 {
		t.Fatalf("returned = %d, want 1", got)
	}
	fake.Handle("c", c.peer.Replicate)
	waitFor(t, "c to get the event queued before it flapped", func() bool { return has(c, "flap") })
	time.Sleep(grace) // a grace that was not cancelled would close the link now
	if p := peerByAddr(a.node.Status(), "c"); p == nil || p.GetRemoving() {
		t.Fatalf("c after coming back: %v, want in the set", p)
	}
	if got := a.node.members.dropped.Load(); got != 1 {
		t.Fatalf("dropped = %d after the flap, want still 1", got)
	}

	// This node's own address: dropped once found, never added again.
	if err := a.node.SetPeers([]string{"b", "c", "a"}); err != nil {
		t.Fatal(err)
	}
	submit("self", fanoutv1.AckPolicy_ACK_POLICY_QUEUED)
	waitFor(t, "the self link to be dropped", func() bool { return peerByAddr(a.node.Status(), "a") == nil })
	if err := a.node.SetPeers([]string{"b", "c", "a"}); err != nil {
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

	resp, err := a.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "x")},
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

	if _, err := c.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k2", "x")}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c to see one id at two addresses", func() bool {
		st := c.node.Status()
		p1, p2 := peerByAddr(st, "a1"), peerByAddr(st, "a2")
		return p1 != nil && p2 != nil && strings.Contains(p1.GetNodeIdConflict(), "also answers from a2") &&
			strings.Contains(p2.GetNodeIdConflict(), "also answers from a1")
	})
}

// gaugeOf returns a collector of only the named metric of n, for testutil.ToFloat64.
func gaugeOf(t *testing.T, n *Node, name string) prometheus.Collector {
	t.Helper()
	return filtered{NewCollector(n), name}
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
	b := fakeMember(t, fake, "b", "b", []string{"k"}, func(c *Config) {
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
	if _, err := b.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("x", "")}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to learn k's id", func() bool { return peerByAddr(b.node.Status(), "k").GetNodeId() == "k" })
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
