package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// limitedPeer is a peer whose receive limit is limit bytes: it refuses a bigger
// request as gRPC does, and takes every event of a smaller one.
type limitedPeer struct {
	limit int
	calls tally // counted as each call ends, what it received recorded
	mu    sync.Mutex
	got   map[string]bool // task ids received
	sizes []int           // events per call, refused or not
}

func (p *limitedPeer) handle(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	defer p.calls.Add()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sizes = append(p.sizes, len(req.Events))
	if n := proto.Size(req); n > p.limit {
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, p.limit)
	}
	for _, ev := range req.Events {
		p.got[ev.TaskId] = true
	}
	return allItems(req, fanoutv1.ItemStatus_ITEM_STATUS_OK), nil
}

func (p *limitedPeer) received(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[id]
}

// TestPeerRefusesTooLarge: a peer whose receive limit is below this node's batches
// gets them split until they fit, and an event bigger than its limit alone is dropped
// as too_large (its ack DROPPED, a WARN line naming it); nothing is retried forever
// and every other event arrives.
func TestPeerRefusesTooLarge(t *testing.T) {
	p := &limitedPeer{limit: 8 << 10, got: map[string]bool{}}
	logs := &syncWriter{}
	tn := nodeWithPeer(t, p.handle, func(cfg *nodeConfig) {
		cfg.Mesh.Batcher.Workers = 1
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	events := []*fanoutv1.Event{{TaskId: "huge", Payload: make([]byte, 20<<10)}}
	for i := range 40 {
		events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("small/%02d", i), Payload: make([]byte, 1000)})
	}
	resp, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: events,
		Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Satisfied || len(resp.PeerAcks) != 1 || resp.PeerAcks[0].State != fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED ||
		!strings.Contains(resp.PeerAcks[0].Detail, "too large") {
		t.Fatalf("ack of a request with an event too large for the peer: %v", resp)
	}
	waitOn(t, "every small event at the peer", p.calls.Changed, func() bool {
		for _, ev := range events[1:] {
			if !p.received(ev.TaskId) {
				return false
			}
		}
		return true
	})
	// The peer records an event before its answer reaches this node: wait for the
	// answers to be counted too.
	drained(t, tn, "nothing pending or in flight", func() bool {
		st := peerStatus(tn)
		return st.InFlight == 0 && st.Pending == 0
	})
	st := peerStatus(tn)
	if st.TooLarge != 1 || st.Succeeded != 40 || st.Permanent != 0 || st.Congestion != 0 || p.received("huge") {
		t.Fatalf("peer status %v", st)
	}
	if st.LastError.GetClass() != "too_large" {
		t.Errorf("last error %v, want class too_large", st.LastError)
	}
	p.mu.Lock()
	calls := len(p.sizes)
	p.mu.Unlock()
	if calls > 20 {
		t.Errorf("%d calls for 41 events: splitting should take a few", calls)
	}
	waitOn(t, "the WARN line naming the dropped event", logs.writes.Changed, func() bool {
		return strings.Contains(logs.String(), `"task_ids":["huge"]`)
	})
}

// TestPendingBoundedInBytes: events for a peer that does not answer are held up to
// --max-buffer-bytes; past it the oldest are evicted as overflow.
func TestPendingBoundedInBytes(t *testing.T) {
	release := make(chan struct{})
	block := func(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, status.Error(codes.Unavailable, "away")
	}
	tn := nodeWithPeer(t, block, func(cfg *nodeConfig) {
		cfg.Mesh.Batcher.Workers = 1
		cfg.Limits.MaxEventBytes = 4 << 10
		cfg.Mesh.Batcher.MaxBufferBytes = 64 << 10
		cfg.Mesh.Batcher.MaxBatchBytes = 8 << 10
	})
	defer close(release)
	for i := range 100 { // 100 × ~4 KiB: 400 KiB for a 64 KiB buffer
		ev := &fanoutv1.Event{TaskId: fmt.Sprintf("k%03d", i), Payload: make([]byte, 4000)}
		if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	// The peer never answers: its batcher does not empty, and no event says its
	// acceptor took the last Submit.
	pollStats(t, "the queue to settle", func() bool { return peerStatus(tn).GetAcceptorQueue() == 0 })
	st := peerStatus(tn)
	if st.PendingBytes > 64<<10 || st.PendingBytes < 48<<10 || st.Overflow == 0 || st.Pending+st.InFlight+st.Overflow != 100 {
		t.Fatalf("peer status %v: want pending within 64 KiB, the rest overflow", st)
	}
}

// TestMessagesFitDefaultClient: with the default limits, every Subscribe message and
// Get page fits the 4 MiB a gRPC client receives by default (the test's client keeps
// it): a batch stays within max_batch_bytes (1 MiB by default), counting origins and
// stamps, and an entry bigger than that goes alone.
func TestMessagesFitDefaultClient(t *testing.T) {
	cfg := testConfig("s")
	if e := entryBytes(cfg.Limits); e > defaultClientRecvBytes {
		t.Fatalf("EntryBytes %d with the default limits, more than a default client takes", e)
	}
	tn := startTestNode(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := tn.app.Subscribe(ctx, &fanoutv1.SubscribeRequest{MaxBatch: 10000, Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	// 3,000 small events from an origin with a 1 KiB id (1 MiB of origins), 30 of
	// 300 KiB, and one at --max-event-bytes with the longest task_id.
	origin := strings.Repeat("o", MaxNodeIDBytes)
	var events []*fanoutv1.Event
	for i := range 3000 {
		events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("small/%04d", i), Version: 1})
	}
	for i := range 30 {
		events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("mid/%02d", i), Version: 1, Payload: make([]byte, 300<<10)})
	}
	events = append(events, &fanoutv1.Event{TaskId: strings.Repeat("m", cfg.Limits.MaxTaskIDBytes), Version: 1, Payload: make([]byte, cfg.Limits.MaxEventBytes)})
	for len(events) > 0 {
		n := min(len(events), 10)
		if _, err := tn.node.Replicate(ctx, Caller{}, &fanoutv1.ReplicateRequest{OriginNode: origin, Events: events[:n]}); err != nil {
			t.Fatal(err)
		}
		events = events[n:]
	}
	got := 0
	for got < 3031 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d entries: %v", got, err)
		}
		items := entriesOf(r)
		if size := proto.Size(r); len(items) > 1 && size > defaultBatchBytes {
			t.Fatalf("a message of %d entries and %d bytes, over max_batch_bytes %d", len(items), size, defaultBatchBytes)
		}
		got += len(items)
	}
	var page *fanoutv1.GetResponse
	for token := ""; ; token = page.NextPageToken {
		if page, err = tn.app.Get(ctx, &fanoutv1.GetRequest{Limit: 10000, PageToken: token}); err != nil {
			t.Fatal(err)
		}
		if size := proto.Size(page); len(page.Entries) > 1 && size > getPageBytes+4096 {
			t.Fatalf("a Get page of %d entries and %d bytes, over %d", len(page.Entries), size, getPageBytes)
		}
		if page.NextPageToken == "" {
			break
		}
	}
}

// TestGetPageEndsBeforeABigEntry: an entry bigger than what is left of a Get page
// starts the next page. Get used to loop forever there: the scan took nothing, and
// the page was not yet full.
func TestGetPageEndsBeforeABigEntry(t *testing.T) {
	tn := startTestNode(t, testConfig("g"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tn.node.Replicate(ctx, Caller{}, &fanoutv1.ReplicateRequest{OriginNode: "a", Events: []*fanoutv1.Event{
		{TaskId: "a/small", Version: 1}, {TaskId: "b/other", Version: 1}, {TaskId: "a/big", Version: 1, Payload: make([]byte, getPageBytes)},
	}}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	pages := 0
	for token := ""; ; pages++ {
		page, err := tn.app.Get(ctx, &fanoutv1.GetRequest{Prefix: "a/", PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			ids = append(ids, e.GetEvent().GetTaskId())
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "a/small,a/big" || pages != 1 {
		t.Fatalf("pages %d, entries %v; want a/small, then a/big on the next page", pages+1, ids)
	}
}
