package grpcapi

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestReplicateStreamServes: the receiver says its limit in the header; each batch is
// answered under its seq as Replicate would answer it, a batch that fails validation
// with its status (naming the field) while the stream goes on, and what the batches
// carried is stored. Bytes that are no ReplicateStreamRequest end the stream.
func TestReplicateStreamServes(t *testing.T) {
	tn := startTestNode(t, testConfig("r"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := tn.peer.ReplicateStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	if got := md.Get(peers.MaxRecvBytesHeader); len(got) != 1 || got[0] != strconv.Itoa(tn.mesh.PeerMessageBytes()) {
		t.Fatalf("header %s = %v, want %d", peers.MaxRecvBytesHeader, got, tn.mesh.PeerMessageBytes())
	}
	reqs := []*fanoutv1.ReplicateStreamRequest{
		{Seq: 1, Batch: &fanoutv1.ReplicateRequest{OriginNode: "o", Events: []*fanoutv1.Event{{TaskId: "a", Version: 1}, {TaskId: "b", Version: 1}}}},
		{Seq: 2, Batch: &fanoutv1.ReplicateRequest{Events: []*fanoutv1.Event{{TaskId: "c", Version: 1}}}}, // no origin
		{Seq: 7, Batch: &fanoutv1.ReplicateRequest{OriginNode: "o", Events: []*fanoutv1.Event{{TaskId: "a", Version: 1}, {TaskId: "d", Version: 2}}}},
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	want := []struct {
		seq      uint64
		code     codes.Code
		statuses []fanoutv1.ItemStatus
	}{
		{1, codes.OK, []fanoutv1.ItemStatus{fanoutv1.ItemStatus_ITEM_STATUS_OK, fanoutv1.ItemStatus_ITEM_STATUS_OK}},
		{2, codes.InvalidArgument, nil},
		{7, codes.OK, []fanoutv1.ItemStatus{fanoutv1.ItemStatus_ITEM_STATUS_STALE, fanoutv1.ItemStatus_ITEM_STATUS_OK}},
	}
	for _, w := range want {
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.Seq != w.seq || codes.Code(m.Code) != w.code {
			t.Fatalf("answer %v, want seq %d code %v", m, w.seq, w.code)
		}
		if w.code == codes.InvalidArgument && !strings.Contains(m.Message, "origin_node") {
			t.Errorf("answer %v does not name origin_node", m)
		}
		if w.code == codes.OK {
			got := m.GetResult().GetStatuses()
			if len(got) != len(w.statuses) || m.Result.NodeId != "r" || m.Result.Incarnation == 0 {
				t.Fatalf("answer %v, want statuses %v from r", m, w.statuses)
			}
			for i := range got {
				if got[i] != w.statuses[i] {
					t.Fatalf("answer %v, want statuses %v", m, w.statuses)
				}
			}
		}
	}
	for _, k := range []string{"a", "b", "d"} {
		if !stored(t, tn.node, k) {
			t.Errorf("%s not stored", k)
		}
	}
	if stored(t, tn.node, "c") {
		t.Error("c, of the refused batch, was stored")
	}
	// Not a ReplicateStreamRequest: the stream ends, INVALID_ARGUMENT.
	if err := stream.SendMsg(&frame.Frame{B: []byte("\x0a\xff")}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("garbage on the stream → %v, want INVALID_ARGUMENT", err)
	}
}

// TestReplicateStreamClosingNode: a closing node tells the sender to close the stream
// (seq 0, UNAVAILABLE), and the stream then ends; a draining node answers batches and
// new streams UNAVAILABLE.
func TestReplicateStreamClosingNode(t *testing.T) {
	tn := startTestNode(t, testConfig("r"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := tn.peer.ReplicateStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one := func(seq uint64) *fanoutv1.ReplicateStreamRequest {
		return &fanoutv1.ReplicateStreamRequest{Seq: seq, Batch: &fanoutv1.ReplicateRequest{OriginNode: "o", Events: []*fanoutv1.Event{{TaskId: "a", Version: seq}}}}
	}
	if err := stream.Send(one(1)); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.Code != 0 {
		t.Fatalf("first answer %v, %v", m, err)
	}
	if _, err := tn.node.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(one(2)); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.Seq != 2 || codes.Code(m.Code) != codes.Unavailable {
		t.Fatalf("batch to a draining node: %v, %v; want UNAVAILABLE", m, err)
	}
	other, err := tn.peer.ReplicateStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("new stream to a draining node: %v, want UNAVAILABLE", err)
	}
	tn.node.Close()
	m, err := stream.Recv()
	if err != nil || m.Seq != 0 || codes.Code(m.Code) != codes.Unavailable {
		t.Fatalf("at close: %v, %v; want seq 0 UNAVAILABLE", m, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want the stream ended (EOF)", err)
	}
}

// TestReplicateStreamHoldsAnswers: a batch sent with answer_hold_micros and stored
// with every event OK is answered in ok_seqs: with the next batch sent without a hold,
// on its own once its hold has passed (seq 0, the receiver's node id and incarnation),
// or when the sender closes the stream; a held batch with an event not OK, or one that
// fails, is answered at once under its own seq. Every batch is answered exactly once.
func TestReplicateStreamHoldsAnswers(t *testing.T) {
	tn := startTestNode(t, testConfig("r"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := tn.peer.ReplicateStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const long = 100_000 // µs: the receiver's cap, so held until something else sends them
	req := func(seq uint64, hold uint32, origin, key string, version uint64) *fanoutv1.ReplicateStreamRequest {
		return &fanoutv1.ReplicateStreamRequest{Seq: seq, AnswerHoldMicros: hold,
			Batch: &fanoutv1.ReplicateRequest{OriginNode: origin, Events: []*fanoutv1.Event{{TaskId: key, Version: version}}}}
	}
	answered := map[uint64]string{} // seq → how: "ok_seqs" or its own code
	recv := func() *fanoutv1.ReplicateStreamResponse {
		t.Helper()
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range m.OkSeqs {
			if how, ok := answered[s]; ok {
				t.Fatalf("seq %d answered twice (%s, then in ok_seqs of %v)", s, how, m)
			}
			answered[s] = "ok_seqs"
		}
		if m.Seq != 0 {
			if how, ok := answered[m.Seq]; ok {
				t.Fatalf("seq %d answered twice (%s, then %v)", m.Seq, how, m)
			}
			answered[m.Seq] = codes.Code(m.Code).String()
		}
		return m
	}
	send := func(r *fanoutv1.ReplicateStreamRequest) {
		t.Helper()
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}

	// Held, then brought back by a batch without a hold. A slow machine may pass the
	// hold first: then they come on their own, before it.
	send(req(1, long, "o", "a", 1))
	send(req(2, long, "o", "b", 1))
	send(req(3, 0, "o", "c", 1))
	for answered[3] == "" {
		recv()
	}
	// Not every event OK (a is stale now), and a batch that fails (no origin): at once.
	send(req(4, long, "o", "a", 1))
	if m := recv(); m.Seq != 4 || m.Code != 0 || m.Result.Statuses[0] != fanoutv1.ItemStatus_ITEM_STATUS_STALE {
		t.Fatalf("a stale batch sent with a hold: %v, want answered at once, STALE", m)
	}
	send(req(5, long, "", "d", 1))
	if m := recv(); m.Seq != 5 || codes.Code(m.Code) != codes.InvalidArgument {
		t.Fatalf("a failing batch sent with a hold: %v, want answered at once, INVALID_ARGUMENT", m)
	}
	// Held for 5 ms: on its own, naming the receiver.
	send(req(6, 5000, "o", "e", 1))
	if m := recv(); m.Seq != 0 || m.Code != 0 || len(m.OkSeqs) != 1 || m.OkSeqs[0] != 6 ||
		m.Result.GetNodeId() != "r" || m.Result.GetIncarnation() == 0 {
		t.Fatalf("after its hold: %v, want seq 0 with ok_seqs [6] from r", m)
	}
	// Held, then the sender closes the stream: answered before it ends.
	send(req(7, long, "o", "f", 1))
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		for _, s := range m.OkSeqs {
			answered[s] = "ok_seqs"
		}
	}
	for s := uint64(1); s <= 7; s++ {
		if answered[s] == "" {
			t.Errorf("seq %d never answered", s)
		}
	}
	for _, s := range []uint64{1, 2, 6, 7} {
		if answered[s] != "ok_seqs" {
			t.Errorf("seq %d answered as %s, want in ok_seqs", s, answered[s])
		}
	}
	for _, k := range []string{"a", "b", "c", "e", "f"} {
		if !stored(t, tn.node, k) {
			t.Errorf("%s not stored", k)
		}
	}
}
