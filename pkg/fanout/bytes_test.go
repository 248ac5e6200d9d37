package fanout

import (
	"bytes"
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
	mu    sync.Mutex
	got   map[string]bool // task ids received
	sizes []int           // events per call, refused or not
}

func (p *limitedPeer) handle(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
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

// syncBuffer is a log sink safe for the node's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPeerRefusesTooLarge: a peer whose receive limit is below this node's batches
// gets them split until they fit, and an event bigger than its limit alone is dropped
// as too_large (its ack DROPPED, a WARN line naming it); nothing is retried forever
// and every other event arrives.
func TestPeerRefusesTooLarge(t *testing.T) {
	p := &limitedPeer{limit: 8 << 10, got: map[string]bool{}}
	logs := &syncBuffer{}
	tn := nodeWithPeer(t, p.handle, func(cfg *Config) {
		cfg.Batcher.Workers = 1
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
	waitFor(t, "every small event at the peer", func() bool {
		for _, ev := range events[1:] {
			if !p.received(ev.TaskId) {
				return false
			}
		}
		return true
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
	waitFor(t, "the WARN line naming the dropped event", func() bool {
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
	tn := nodeWithPeer(t, block, func(cfg *Config) {
		cfg.Batcher.Workers = 1
		cfg.Limits.MaxEventBytes = 4 << 10
		cfg.Batcher.MaxBufferBytes = 64 << 10
		cfg.Batcher.MaxBatchBytes = 8 << 10
	})
	defer close(release)
	for i := range 100 { // 100 × ~4 KiB: 400 KiB for a 64 KiB buffer
		ev := &fanoutv1.Event{TaskId: fmt.Sprintf("k%03d", i), Payload: make([]byte, 4000)}
		if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the queue to settle", func() bool { return peerStatus(tn).GetAcceptorQueue() == 0 })
	st := peerStatus(tn)
	if st.PendingBytes > 64<<10 || st.PendingBytes < 48<<10 || st.Overflow == 0 || st.Pending+st.InFlight+st.Overflow != 100 {
		t.Fatalf("peer status %v: want pending within 64 KiB, the rest overflow", st)
	}
}
