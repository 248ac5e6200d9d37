package fanout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/protobuf/proto"
)

func TestSubmitReachesEveryPeerButNotOrigin(t *testing.T) {
	nodes := cluster(t, []string{"a", "b", "c"}, nil)
	subA := subscribe(t, nodes["a"], "")
	subB := subscribe(t, nodes["b"], "")
	subC := subscribe(t, nodes["c"], "")
	resp, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{
		RequestId: 7,
		Events:    []*fanoutv1.Event{ev("orders/1", "one"), {TaskId: "orders/2", Version: 42}},
	})
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if resp.RequestId != 7 || !resp.Satisfied || len(resp.Versions) != 2 || resp.Versions[1] != 42 || resp.Versions[0] == 0 {
		t.Fatalf("response = %v; want request_id 7, satisfied, versions [hlc, 42]", resp)
	}
	for name, sub := range map[string]<-chan *fanoutv1.SubscribeResponse{"b": subB, "c": subC} {
		got := map[string]uint64{}
		for range 2 {
			r := recv(t, sub)
			if r.OriginNode != "a" || r.SubmittedAt == nil {
				t.Errorf("%s: origin %q submitted_at %v; want a and set", name, r.OriginNode, r.SubmittedAt)
			}
			got[r.Event.TaskId] = r.Event.Version
		}
		if got["orders/1"] != resp.Versions[0] || got["orders/2"] != 42 {
			t.Errorf("%s received %v; want versions %v", name, got, resp.Versions)
		}
	}
	// A marker from b reaches a; nothing of a's own events may have come before it.
	if _, err := nodes["b"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("marker", "")}}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, subA); r.Event.TaskId != "marker" {
		t.Fatalf("origin a received its own event %q (echo)", r.Event.TaskId)
	}
}

func TestSubscribePrefixFilter(t *testing.T) {
	nodes := cluster(t, []string{"a", "b"}, nil)
	sub := subscribe(t, nodes["b"], "orders/")
	_, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{
		Events: []*fanoutv1.Event{ev("users/1", ""), ev("orders/9", ""), ev("users/2", "")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := recv(t, sub); r.Event.TaskId != "orders/9" {
		t.Fatalf("got %q, want only orders/9", r.Event.TaskId)
	}
}

func TestSubmitStreamMatchesRequestIDs(t *testing.T) {
	nodes := cluster(t, []string{"a", "b"}, nil)
	stream, err := nodes["a"].app.SubmitStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		if err := stream.Send(&fanoutv1.SubmitRequest{RequestId: id, Events: []*fanoutv1.Event{ev("k", "")}}); err != nil {
			t.Fatal(err)
		}
	}
	var last uint64
	for id := uint64(1); id <= 3; id++ {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.RequestId != id || len(resp.Versions) != 1 || resp.Versions[0] <= last {
			t.Fatalf("response %d = %v; want request_id %d and a rising version", id, resp, id)
		}
		last = resp.Versions[0]
	}
	stream.CloseSend()
	// A bad request ends the stream with INVALID_ARGUMENT naming the field.
	stream, _ = nodes["a"].app.SubmitStream(context.Background())
	stream.Send(&fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{}}})
	_, err = stream.Recv()
	wantInvalid(t, err, "events[0].task_id")
}

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var inv *InvalidError // the edge's INVALID_ARGUMENT, with inv's message
	if !errors.As(err, &inv) || !strings.Contains(inv.Error(), field) {
		t.Fatalf("err = %v; want INVALID_ARGUMENT naming %s", err, field)
	}
}

func TestSubmitRejectsWholeRequest(t *testing.T) {
	nodes := cluster(t, []string{"a", "b"}, nil)
	sub := subscribe(t, nodes["b"], "")
	_, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{
		Events: []*fanoutv1.Event{ev("good", ""), ev("also-good", ""), ev("fine", ""), {TaskId: ""}},
	})
	wantInvalid(t, err, "events[3].task_id: empty")
	if _, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("marker", "")}}); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, sub); r.Event.TaskId != "marker" {
		t.Fatalf("first delivery %q: part of a rejected request was applied", r.Event.TaskId)
	}
	// The counters are published at the end of an acceptor step, which can be after b
	// received the marker: wait for the marker's count, then check nothing else counted.
	accepted := func() uint64 { return nodes["a"].node.Status().Peers[0].Accepted }
	drained(t, nodes["a"], "the marker to be counted", func() bool { return accepted() >= 1 })
	if got := accepted(); got != 1 {
		t.Fatalf("accepted = %d; want 1 (only the marker)", got)
	}
}

func TestReplicateItemStatuses(t *testing.T) {
	cfg := testConfig("r")
	cfg.State.MaxKeys = 2
	cfg.State.OwnReservePercent = 0 // peers may fill the table
	tn := startTestNode(t, cfg)
	call := func(origin string, events ...*fanoutv1.Event) []fanoutv1.ItemStatus {
		t.Helper()
		resp, err := tn.peer.Replicate(context.Background(), &fanoutv1.ReplicateRequest{OriginNode: origin, Events: events})
		if err != nil {
			t.Fatalf("Replicate: %v", err)
		}
		if resp.NodeId != "r" {
			t.Fatalf("node_id = %q, want r", resp.NodeId)
		}
		return resp.Statuses
	}
	const (
		ok      = fanoutv1.ItemStatus_ITEM_STATUS_OK
		stale   = fanoutv1.ItemStatus_ITEM_STATUS_STALE
		busy    = fanoutv1.ItemStatus_ITEM_STATUS_BUSY
		invalid = fanoutv1.ItemStatus_ITEM_STATUS_INVALID
	)
	steps := []struct {
		name   string
		origin string
		events []*fanoutv1.Event
		want   []fanoutv1.ItemStatus
	}{
		{"new events are OK", "x", []*fanoutv1.Event{{TaskId: "t1", Version: 10}, {TaskId: "t2", Version: 10}}, []fanoutv1.ItemStatus{ok, ok}},
		{"duplicate is STALE", "x", []*fanoutv1.Event{{TaskId: "t1", Version: 10}}, []fanoutv1.ItemStatus{stale}},
		{"older is STALE", "x", []*fanoutv1.Event{{TaskId: "t1", Version: 9}}, []fanoutv1.ItemStatus{stale}},
		{"same version, lower origin is STALE", "a", []*fanoutv1.Event{{TaskId: "t1", Version: 10}}, []fanoutv1.ItemStatus{stale}},
		{"same version, higher origin wins in a full table", "y", []*fanoutv1.Event{{TaskId: "t1", Version: 10}}, []fanoutv1.ItemStatus{ok}},
		{"new task in a full table is BUSY", "x", []*fanoutv1.Event{{TaskId: "t3", Version: 1}}, []fanoutv1.ItemStatus{busy}},
		{"BUSY left the table alone: retry is BUSY again, not STALE", "x", []*fanoutv1.Event{{TaskId: "t3", Version: 1}}, []fanoutv1.ItemStatus{busy}},
		{"a version far ahead of the clock is INVALID", "x", []*fanoutv1.Event{{TaskId: "t1", Version: ^uint64(0)}}, []fanoutv1.ItemStatus{invalid}},
		{"a delete is a write like any other", "x", []*fanoutv1.Event{{TaskId: "t2", Version: 11, Deleted: true}}, []fanoutv1.ItemStatus{ok}},
		{"invalid events", "x", []*fanoutv1.Event{{TaskId: ""}, {TaskId: "v0", Version: 0}, {TaskId: "big", Version: 1, Payload: make([]byte, 2<<20)}}, []fanoutv1.ItemStatus{invalid, invalid, invalid}},
		{"unknown fields count toward the event's bytes", "x", []*fanoutv1.Event{
			bloated(&fanoutv1.Event{TaskId: "t1", Version: 20}, 100), bloated(&fanoutv1.Event{TaskId: "u2", Version: 5}, cfg.Limits.EventBytes()),
		}, []fanoutv1.ItemStatus{ok, invalid}},
		{"our own origin, never written here, is refused", "r", []*fanoutv1.Event{{TaskId: "t9", Version: 1}}, []fanoutv1.ItemStatus{invalid}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			got := call(s.origin, s.events...)
			if len(got) != len(s.want) {
				t.Fatalf("statuses %v, want %v", got, s.want)
			}
			for i := range got {
				if got[i] != s.want[i] {
					t.Fatalf("statuses %v, want %v", got, s.want)
				}
			}
		})
	}
	// t2's delete made room at once (a tombstone counts against a bound of its own):
	// the BUSY task gets in.
	if got := call("x", &fanoutv1.Event{TaskId: "t3", Version: 1}); got[0] != ok {
		t.Fatalf("after t2's delete: %v, want OK", got)
	}
	st := tn.node.Status().GetState()
	if st.GetRefused() != 2 || st.GetRefusedPeer() != 2 || st.GetKeys() != 2 || st.GetTombstones() != 1 {
		t.Fatalf("state status %v: want 2 refused (both a peer's), 2 keys, 1 tombstone", st)
	}
}

func TestReplicateRequestValidation(t *testing.T) {
	tn := startTestNode(t, testConfig("r"))
	cases := []struct {
		name  string
		req   *fanoutv1.ReplicateRequest
		field string
	}{
		{"no origin", &fanoutv1.ReplicateRequest{}, "origin_node"},
		{"submitted_at mismatch", &fanoutv1.ReplicateRequest{OriginNode: "x", Events: []*fanoutv1.Event{{TaskId: "a", Version: 1}}, SubmittedAtUnixNanos: []int64{1, 2}}, "submitted_at_unix_nanos"},
		{"too many events", &fanoutv1.ReplicateRequest{OriginNode: "x", Events: make([]*fanoutv1.Event, 10001)}, "events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := tn.peer.Replicate(context.Background(), c.req)
			wantInvalid(t, err, c.field)
		})
	}
}

func TestGetStatusAndSelfDetection(t *testing.T) {
	// Node "a" lists itself among its peers, as DNS discovery would; the first
	// Replicate answer reveals it and the link is dropped.
	var conns connWatch // a's connections
	nodes := cluster(t, []string{"a", "b"}, func(c *nodeConfig) {
		if c.NodeID == "a" {
			c.Mesh.Peers = append(c.Mesh.Peers, "a")
			c.Mesh.Dial = conns.wrap(c.Mesh.Dial)
		}
	})
	if n := len(nodes["a"].node.Status().Peers); n != 2 {
		t.Fatalf("peers before first send = %d, want 2", n)
	}
	if _, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "")}}); err != nil {
		t.Fatal(err)
	}
	// The self link leaves the set, then its connection is closed; b's batcher then
	// empties once b has answered.
	conns.of("a").closes.Await(t, "the self link dropped", 1)
	drained(t, nodes["a"], "self link dropped and b's node id learned", func() bool {
		st, err := nodes["a"].app.GetStatus(context.Background(), &fanoutv1.GetStatusRequest{})
		return err == nil && len(st.Peers) == 1 && st.Peers[0].NodeId == "b" && st.Peers[0].Succeeded == 1
	})
	st, _ := nodes["a"].app.GetStatus(context.Background(), &fanoutv1.GetStatusRequest{})
	if st.NodeId != "a" || st.Peers[0].Address != "b" || st.Peers[0].Accepted != 1 || st.Peers[0].Breaker != "closed" {
		t.Fatalf("status = %v", st)
	}
}

func TestDrainRefusesSubmitAndEmptiesQueues(t *testing.T) {
	nodes := cluster(t, []string{"a", "b"}, nil)
	sub := subscribe(t, nodes["b"], "")
	if _, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "")}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := nodes["a"].node.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	recv(t, sub)
	_, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "")}})
	if !errors.Is(err, ErrDraining) { // the edge's UNAVAILABLE
		t.Fatalf("Submit while draining: %v, want UNAVAILABLE", err)
	}
}

// TestDrainRefusesPeerTraffic: from the first moment of a drain the node refuses
// Replicate and every anti-entropy call with UNAVAILABLE (the sender keeps its events
// and retries), and the report counts what was sent.
func TestDrainRefusesPeerTraffic(t *testing.T) {
	nodes := cluster(t, []string{"a", "b"}, nil)
	if _, err := nodes["a"].app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "")}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := nodes["a"].node.Drain(ctx)
	if err != nil || rep.Peers != 1 || rep.Unsent != 0 || rep.Durable {
		t.Fatalf("Drain: %+v, %v; want one peer, nothing unsent, no data dir", rep, err)
	}
	_, err = nodes["a"].peer.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "b", Events: []*fanoutv1.Event{{TaskId: "x", Version: 1}}})
	if !errors.Is(err, ErrShuttingDown) { // the edge's UNAVAILABLE
		t.Errorf("Replicate to a draining node: %v, want UNAVAILABLE", err)
	}
	if _, err := nodes["a"].peer.Digest(ctx, &fanoutv1.DigestRequest{NodeId: "b", TreeVersion: 1}); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Digest to a draining node: %v, want UNAVAILABLE", err)
	}
	if _, err := nodes["a"].peer.Push(ctx, &fanoutv1.PushRequest{NodeId: "b"}); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Push to a draining node: %v, want UNAVAILABLE", err)
	}
	if _, ok := nodes["a"].node.table.Get([]byte("x")); ok {
		t.Error("the refused Replicate was stored")
	}
}

func TestRemoteOlderThanLocalWriteIsNotDelivered(t *testing.T) {
	tn := startTestNode(t, testConfig("a"))
	sub := subscribe(t, tn, "")
	resp, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Version: 100}}})
	if err != nil || resp.Versions[0] != 100 {
		t.Fatalf("Submit: %v %v", resp, err)
	}
	r, err := tn.peer.Replicate(context.Background(), &fanoutv1.ReplicateRequest{OriginNode: "b", Events: []*fanoutv1.Event{{TaskId: "k", Version: 99}, {TaskId: "marker", Version: 1}}})
	if err != nil || r.Statuses[0] != fanoutv1.ItemStatus_ITEM_STATUS_STALE {
		t.Fatalf("Replicate older than local write: %v %v, want STALE", r, err)
	}
	if got := recv(t, sub); got.Event.TaskId != "marker" {
		t.Fatalf("delivered %q before marker", got.Event.TaskId)
	}
}

// TestSnapshotAfterAStreamLeaves: a stream that never reads holds nothing up and takes
// nothing away: a later stream with snapshot gets every key, then the marker.
func TestSnapshotAfterAStreamLeaves(t *testing.T) {
	tn := startTestNode(t, testConfig("b"))
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := tn.app.Subscribe(ctx, &fanoutv1.SubscribeRequest{}); err != nil { // never read
		t.Fatal(err)
	}
	waitOn(t, "the first stream", tn.node.SubscribersChanged, func() bool { return tn.node.subscribers.Load() == 1 })
	const n = 1000
	events := make([]*fanoutv1.Event, n)
	for i := range events {
		events[i] = &fanoutv1.Event{TaskId: fmt.Sprintf("t%04d", i), Version: 1, Payload: make([]byte, 512)}
	}
	resp, err := tn.peer.Replicate(context.Background(), &fanoutv1.ReplicateRequest{OriginNode: "a", Events: events})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range resp.Statuses {
		if s != fanoutv1.ItemStatus_ITEM_STATUS_OK {
			t.Fatalf("event %d: %s", i, s)
		}
	}
	cancel()
	waitOn(t, "the first stream to go", tn.node.SubscribersChanged, func() bool { return tn.node.subscribers.Load() == 0 })

	stream, err := tn.app.Subscribe(context.Background(), &fanoutv1.SubscribeRequest{Snapshot: true, MaxBatch: 100})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.GetSnapshotComplete() {
			break
		}
		for _, e := range entriesOf(r) {
			seen[e.GetEvent().GetTaskId()] = true
		}
	}
	if len(seen) != n {
		t.Fatalf("the snapshot had %d of %d keys", len(seen), n)
	}
}

// entriesOf is the entries of one Subscribe response, in either shape.
func entriesOf(r *fanoutv1.SubscribeResponse) []*fanoutv1.Entry {
	if r.GetEvent() != nil {
		return []*fanoutv1.Entry{{Event: r.GetEvent(), OriginNode: r.GetOriginNode(), SubmittedAt: r.GetSubmittedAt(), Revision: r.GetRevision()}}
	}
	return r.GetBatch()
}

func TestSubscribeBatches(t *testing.T) {
	tn := startTestNode(t, testConfig("b"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	stream, err := tn.app.Subscribe(sctx, &fanoutv1.SubscribeRequest{MaxBatch: 50})
	if err != nil {
		t.Fatal(err)
	}
	waitOn(t, "the stream", tn.node.SubscribersChanged, func() bool { return tn.node.subscribers.Load() == 1 })
	const n = 300
	events := make([]*fanoutv1.Event, n)
	for i := range events {
		events[i] = &fanoutv1.Event{TaskId: fmt.Sprintf("t%04d", i), Version: 1}
	}
	if _, err := tn.peer.Replicate(context.Background(), &fanoutv1.ReplicateRequest{OriginNode: "a", Events: events}); err != nil {
		t.Fatal(err)
	}
	var got []string
	largest := 0
	for len(got) < n {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetBatch()) > 0 && r.GetEvent() != nil {
			t.Fatal("a batched response also set its own event")
		}
		items := entriesOf(r)
		if len(items) > 50 {
			t.Fatalf("batch of %d, max_batch is 50", len(items))
		}
		largest = max(largest, len(items))
		for _, it := range items {
			if it.GetOriginNode() != "a" || it.GetSubmittedAt() != nil && it.GetSubmittedAt().AsTime().IsZero() {
				t.Fatalf("bad delivery %v", it)
			}
			got = append(got, it.GetEvent().GetTaskId())
		}
	}
	for i, id := range got {
		if id != events[i].TaskId {
			t.Fatalf("delivery %d is %s, want %s (order)", i, id, events[i].TaskId)
		}
	}
	if largest < 2 {
		t.Fatalf("300 waiting events never came batched (largest %d)", largest)
	}
	// The server counts a message after its Send returns, which can be just after the
	// client has it: end the stream and wait for its handler to return, then check the
	// count is exact.
	scancel()
	select {
	case <-stream.done:
	case <-time.After(waitTimeout):
		t.Fatalf("the stream's handler did not return within %s of its end", waitTimeout)
	}
	if d := tn.node.delivered.Load(); d != n {
		t.Fatalf("delivered counter %d, want %d (counts events, not messages)", d, n)
	}
	big, err := tn.app.Subscribe(ctx, &fanoutv1.SubscribeRequest{MaxBatch: 10001})
	if err == nil {
		_, err = big.Recv()
	}
	wantInvalid(t, err, "max_batch")
}

// TestLinkCoalescesToTheHighestVersion: a peer's batcher keeps the highest version of a
// task, not the latest arrival. With k@1 held in flight, k@1000 then k@500 arrive;
// the peer then receives k@1000 and never k@500.
func TestLinkCoalescesToTheHighestVersion(t *testing.T) {
	fake := peers.NewFakeNetwork()
	release := make(chan struct{})
	var mu sync.Mutex
	var got []uint64
	var calls tally // b's calls, counted once got has their versions
	fake.Handle("b", func(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		mu.Lock()
		first := len(got) == 0
		for _, ev := range req.Events {
			got = append(got, ev.Version)
		}
		mu.Unlock()
		calls.Add()
		if first {
			<-release
		}
		st := make([]fanoutv1.ItemStatus, len(req.Events))
		for i := range st {
			st[i] = fanoutv1.ItemStatus_ITEM_STATUS_OK
		}
		return &fanoutv1.ReplicateResponse{NodeId: "b", Statuses: st}, nil
	})
	cfg := testConfig("a", "b")
	cfg.Mesh.Dial = func(addr string) (mesh.Conn, error) { return fake.Dial(addr), nil }
	var overridden tally // fates Overridden
	cfg.onFate = func(_ string, _ *batcher.Task[wire.Outgoing], f batcher.Fate) {
		if f == batcher.FateOverridden {
			overridden.Add()
		}
	}
	tn := startTestNode(t, cfg)
	offer := func(v uint64) {
		t.Helper()
		raw, err := proto.Marshal(&fanoutv1.Event{TaskId: "k", Version: v})
		if err != nil {
			t.Fatal(err)
		}
		task := batcher.Task[wire.Outgoing]{ID: "k", Value: wire.Outgoing{Raw: raw, Version: v}, Submitted: time.Now()}
		if err := tn.mesh.Publish(context.Background(), []batcher.Task[wire.Outgoing]{task}, nil); err != nil {
			t.Fatal(err)
		}
	}
	offer(1)
	waitOn(t, "k@1 in flight", calls.Changed, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 })
	offer(1000)
	offer(500)
	overridden.Await(t, "k@500 dropped as overridden", 1)
	close(release)
	waitOn(t, "the second batch", calls.Changed, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if got[1] != 1000 {
		t.Fatalf("the peer received versions %v, want [1 1000]", got)
	}
}
