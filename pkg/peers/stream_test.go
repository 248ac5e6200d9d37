package peers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// streamPeer serves ReplicateStream: each batch is answered by answer, on a goroutine
// of its own after a random delay of up to 2 ms, so that answers come back out of
// order. A nil answer (and nil error) is never answered. It sends its header as a
// stream opens, as the sidecar does: with maxRecv, when set, as the receiver's limit;
// once headerGate (if any) is closed; with noHeader, none before the first answer.
type streamPeer struct {
	fanoutv1.UnimplementedPeerServiceServer
	maxRecv    int
	headerGate chan struct{}
	noHeader   bool
	answer     func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error)
	streams    atomic.Int32 // opened
	batches    atomic.Int32 // received
	// arrived is closed when the first batch is received (arrivedChan makes it).
	arrived     chan struct{}
	arrivedOnce sync.Once
	goodbye     chan struct{} // a value sends seq 0 with UNAVAILABLE on the open streams
	unary       atomic.Int32  // unary Replicate calls
	opts        []grpc.ServerOption
}

func (p *streamPeer) Replicate(_ context.Context, r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	p.unary.Add(1)
	return p.answer(r)
}

func (p *streamPeer) ReplicateStream(stream fanoutv1.PeerService_ReplicateStreamServer) error {
	p.streams.Add(1)
	if p.headerGate != nil {
		<-p.headerGate
	}
	if !p.noHeader {
		md := metadata.MD{}
		if p.maxRecv > 0 {
			md = metadata.Pairs(MaxRecvBytesHeader, strconv.Itoa(p.maxRecv))
		}
		if err := stream.SendHeader(md); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	send := func(m *fanoutv1.ReplicateStreamResponse) {
		mu.Lock()
		defer mu.Unlock()
		_ = stream.Send(m)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{})
	defer close(done)
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-p.goodbye:
			send(&fanoutv1.ReplicateStreamResponse{Code: uint32(codes.Unavailable), Message: "shutting down"})
		case <-done:
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if p.batches.Add(1) == 1 {
			close(p.arrivedChan())
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			resp, err := p.answer(req.Batch)
			switch {
			case err != nil:
				s := status.Convert(err)
				send(&fanoutv1.ReplicateStreamResponse{Seq: req.Seq, Code: uint32(s.Code()), Message: s.Message()})
			case resp != nil:
				send(&fanoutv1.ReplicateStreamResponse{Seq: req.Seq, Result: resp})
			}
		}()
	}
}

// serve starts p on loopback with the sidecar's server options; it stops with the test.
func (p *streamPeer) serve(t *testing.T) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(frame.ServerOptions(), p.opts...)...)
	fanoutv1.RegisterPeerServiceServer(srv, p)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), srv
}

// okAnswer answers every event OK, with the batch's origin as node id (so that a test
// can tell whose answer a batch got).
func okAnswer(r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	st := make([]fanoutv1.ItemStatus, len(r.Events))
	for i := range st {
		st[i] = fanoutv1.ItemStatus_ITEM_STATUS_OK
	}
	return &fanoutv1.ReplicateResponse{NodeId: r.OriginNode, Statuses: st}, nil
}

// okAfter answers like okAnswer, except that a batch from origin "wait" is answered
// only once release is closed.
func okAfter(release <-chan struct{}) func(*fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return func(r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		if r.OriginNode == "wait" {
			<-release
		}
		return okAnswer(r)
	}
}

// inFlight sends a batch from origin "wait" on c and returns once p has it; its
// error arrives on the channel.
func (p *streamPeer) inFlight(ctx context.Context, c *Conn) <-chan error {
	failed := make(chan error, 1)
	go func() {
		_, err := c.Replicate(ctx, batch("wait", 1, 1))
		failed <- err
	}()
	<-p.arrivedChan()
	return failed
}

func (p *streamPeer) arrivedChan() chan struct{} {
	p.arrivedOnce.Do(func() { p.arrived = make(chan struct{}) })
	return p.arrived
}

func batch(origin string, events int, payload int) *fanoutv1.ReplicateRequest {
	r := &fanoutv1.ReplicateRequest{OriginNode: origin}
	for i := range events {
		r.Events = append(r.Events, &fanoutv1.Event{TaskId: fmt.Sprint(i), Version: 1, Payload: make([]byte, payload)})
	}
	return r
}

func dialT(t *testing.T, addr string, opts Options) *Conn {
	t.Helper()
	c, err := Dial(addr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStreamWindow: batches from 8 goroutines at once share one stream, answered out
// of order, and each gets its own answer.
func TestStreamWindow(t *testing.T) {
	p := &streamPeer{answer: okAnswer}
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8*50)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				origin := fmt.Sprintf("w%d-%d", w, i)
				resp, err := c.Replicate(ctx, batch(origin, 1+i%5, 10))
				if err != nil || resp.NodeId != origin || len(resp.Statuses) != 1+i%5 {
					errs <- fmt.Errorf("batch %s: answer %v, %v", origin, resp, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := p.streams.Load(); n != 1 {
		t.Errorf("%d streams opened for 400 batches, want 1", n)
	}
	if n := p.unary.Load(); n != 0 {
		t.Errorf("%d unary calls", n)
	}
}

// TestStreamBatchErrors: a batch answered with a status is classified as the unary
// call's status would be, and the stream goes on.
func TestStreamBatchErrors(t *testing.T) {
	p := &streamPeer{answer: func(r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		switch r.OriginNode {
		case "busy":
			return nil, status.Error(codes.ResourceExhausted, "busy")
		case "bad":
			return nil, status.Error(codes.InvalidArgument, "origin_node: empty")
		case "down":
			return nil, status.Error(codes.Unavailable, "draining")
		case "short":
			return &fanoutv1.ReplicateResponse{}, nil
		}
		return okAnswer(r)
	}}
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		origin string
		want   error
	}{{"busy", ErrCongestion}, {"bad", ErrPermanent}, {"down", ErrNetwork}, {"short", ErrPermanent}, {"x", nil}} {
		_, err := c.Replicate(ctx, batch(tc.origin, 2, 1))
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s → %v, want %v", tc.origin, err, tc.want)
		}
	}
	if n := p.streams.Load(); n != 1 {
		t.Errorf("%d streams opened, want 1: a batch's error does not end the stream", n)
	}
}

// TestStreamTooLarge: a batch over the receiver's advertised limit, or this
// connection's own, is refused before it is sent (ErrTooLarge, never congestion), and
// the stream stays open for the next.
func TestStreamTooLarge(t *testing.T) {
	for _, tc := range []struct {
		name          string
		advertised    int
		connectionMax int
	}{{"over the peer's limit", 4096, 0}, {"over this connection's limit", 0, 4096}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &streamPeer{answer: okAnswer, maxRecv: tc.advertised}
			addr, _ := p.serve(t)
			c := dialT(t, addr, Options{MaxMessageBytes: tc.connectionMax})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Replicate(ctx, batch("x", 1, 1)); err != nil {
				t.Fatal(err)
			}
			_, err := c.Replicate(ctx, batch("x", 1, 8192))
			if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrCongestion) {
				t.Fatalf("8 KiB batch, 4 KiB limit → %v, want too large", err)
			}
			if _, err := c.Replicate(ctx, batch("x", 1, 1)); err != nil {
				t.Fatalf("a small batch after it → %v", err)
			}
			if s, b := p.streams.Load(), p.batches.Load(); s != 1 || b != 2 {
				t.Errorf("%d streams, %d batches received; want 1 and 2 (the big one never sent)", s, b)
			}
		})
	}
}

// TestStreamTimeout: a batch the peer never answers fails as congestion when its
// deadline passes, and the next batch goes on a fresh stream.
func TestStreamTimeout(t *testing.T) {
	p := &streamPeer{answer: func(r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		if r.OriginNode == "hang" {
			return nil, nil // never answered
		}
		return okAnswer(r)
	}}
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Replicate(ctx, batch("hang", 1, 1)); !errors.Is(err, ErrCongestion) {
		t.Fatalf("unanswered batch → %v, want congestion", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, err := c.Replicate(ctx2, batch("x", 1, 1)); err != nil {
		t.Fatalf("the next batch → %v", err)
	}
	if n := p.streams.Load(); n != 2 {
		t.Errorf("%d streams opened, want 2", n)
	}
}

// TestStreamGoodbye: the receiver closing the stream (seq 0, UNAVAILABLE) fails the
// batches in flight as network failures; the next batch opens another stream.
func TestStreamGoodbye(t *testing.T) {
	release := make(chan struct{})
	p := &streamPeer{goodbye: make(chan struct{}, 1), answer: okAfter(release)}
	defer close(release)
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	failed := p.inFlight(ctx, c)
	p.goodbye <- struct{}{}
	if err := <-failed; !errors.Is(err, ErrNetwork) {
		t.Fatalf("batch in flight at goodbye → %v, want network failure", err)
	}
	if _, err := c.Replicate(ctx, batch("x", 1, 1)); err != nil {
		t.Fatalf("the next batch → %v", err)
	}
	if n := p.streams.Load(); n != 2 {
		t.Errorf("%d streams opened, want 2", n)
	}
}

// TestStreamPeerGone: batches in flight when the peer stops fail as network failures,
// as do the next ones while it is down; once it is back, a new stream carries them.
func TestStreamPeerGone(t *testing.T) {
	block := make(chan struct{})
	p := &streamPeer{answer: okAfter(block)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	srv := grpc.NewServer(frame.ServerOptions()...)
	fanoutv1.RegisterPeerServiceServer(srv, p)
	go srv.Serve(lis)
	c := dialT(t, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	failed := p.inFlight(ctx, c)
	close(block)
	srv.Stop()
	if err := <-failed; err != nil && !errors.Is(err, ErrNetwork) {
		t.Fatalf("batch in flight when the peer stopped → %v, want network failure (or its answer)", err)
	}
	if _, err := c.Replicate(ctx, batch("x", 1, 1)); !errors.Is(err, ErrNetwork) {
		t.Fatalf("peer down → %v, want network failure", err)
	}
	lis2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv2 := grpc.NewServer(frame.ServerOptions()...)
	fanoutv1.RegisterPeerServiceServer(srv2, p)
	go srv2.Serve(lis2)
	defer srv2.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Replicate(ctx, batch("x", 1, 1))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNetwork) || time.Now().After(deadline) {
			t.Fatalf("peer back → %v", err)
		}
		time.Sleep(50 * time.Millisecond) // gRPC reconnects with backoff
	}
}

// TestStreamFallsBackToUnary: a peer without ReplicateStream (before API v1.1) is sent
// unary calls, from the first batch on, and no stream is tried again for a while.
func TestStreamFallsBackToUnary(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv := grpc.NewServer()
	fanoutv1.RegisterPeerServiceServer(srv, peerFunc{f: func(r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		calls.Add(1)
		return okAnswer(r)
	}})
	go srv.Serve(lis)
	defer srv.Stop()
	c := dialT(t, lis.Addr().String(), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := c.Replicate(ctx, batch("x", 1, 1)); err != nil {
			t.Fatalf("batch %d → %v", i, err)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d unary calls for 3 batches", n)
	}
	c.mu.Lock()
	until := c.unaryUntil
	c.mu.Unlock()
	if time.Until(until) < unaryFor-10*time.Second {
		t.Fatalf("unary until %v: the stream would be tried again too soon", until)
	}
}

// TestStreamUnaryOption: with Options.Unary, batches go as unary calls to a peer that
// has the stream too.
func TestStreamUnaryOption(t *testing.T) {
	p := &streamPeer{answer: okAnswer}
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{Unary: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Replicate(ctx, batch("x", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if s, u := p.streams.Load(), p.unary.Load(); s != 0 || u != 1 {
		t.Fatalf("%d streams, %d unary calls; want 0 and 1", s, u)
	}
}

// TestStreamWaitsForLimit: a new stream's batches wait for the receiver's header
// before they are sent, so that one over the limit it says is refused here, as too
// large, and does not end the stream with the batches in flight beside it: two
// batches over the limit, sent as the stream opens, are both too large (never
// congestion, as the one beside a refused batch would be), and a small one after
// them goes on the same stream.
func TestStreamWaitsForLimit(t *testing.T) {
	gate := make(chan struct{})
	p := &streamPeer{answer: okAnswer, maxRecv: 4096, headerGate: gate,
		opts: []grpc.ServerOption{grpc.MaxRecvMsgSize(4096)}}
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, size := range []int{8192, 9000} { // sizes apart: a refusal names its own
		go func() {
			_, err := c.Replicate(ctx, batch("x", 1, size))
			errs <- err
		}()
	}
	// A window in which nothing may come back, not a wait for an event: the receiver
	// has not said its limit, so neither batch has been sent.
	select {
	case err := <-errs:
		t.Fatalf("a batch came back (%v) before the receiver's header: it was sent without its limit", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrCongestion) {
			t.Fatalf("a batch of 8 KiB or more to a peer that says 4 KiB → %v, want too large, not congestion", err)
		}
	}
	if _, err := c.Replicate(ctx, batch("x", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if got := p.streams.Load(); got != 1 {
		t.Fatalf("%d streams opened, want 1: the refusals ended none", got)
	}
}

// TestStreamHeaderWait: a receiver that sends no header before its first answer is
// sent the batch after Conn.headerWait, and answers it.
func TestStreamHeaderWait(t *testing.T) {
	p := &streamPeer{answer: okAnswer, noHeader: true}
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{})
	c.headerWait = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := c.Replicate(ctx, batch("x", 2, 1)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < c.headerWait {
		t.Fatalf("answered after %s, before the header wait of %s ended: the batch did not wait", took, c.headerWait)
	}
	// The header came with the answer: the next batch does not wait.
	if _, err := c.Replicate(ctx, batch("x", 2, 1)); err != nil {
		t.Fatal(err)
	}
	if got := p.batches.Load(); got != 2 {
		t.Fatalf("the peer received %d batches, want 2", got)
	}
}

// TestStreamRefusedBySize: a peer that has not said its limit refuses a batch over it
// with gRPC's size refusal, which ends the stream. That batch is too large; another
// batch in flight on the stream is congestion (sent again), never too large; the
// limit the refusal names holds for the connection's next streams, so the next big
// batch is refused before it is sent.
func TestStreamRefusedBySize(t *testing.T) {
	release := make(chan struct{})
	p := &streamPeer{answer: okAfter(release), opts: []grpc.ServerOption{grpc.MaxRecvMsgSize(4096)}}
	defer close(release)
	addr, _ := p.serve(t)
	c := dialT(t, addr, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	innocent := p.inFlight(ctx, c)
	if _, err := c.Replicate(ctx, batch("x", 1, 8192)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("8 KiB batch to a 4 KiB peer → %v, want too large", err)
	}
	if err := <-innocent; !errors.Is(err, ErrCongestion) || errors.Is(err, ErrTooLarge) {
		t.Fatalf("the small batch in flight beside it → %v, want congestion", err)
	}
	if got := c.sendLimit(); got != 4096 {
		t.Fatalf("send limit %d after the refusal, want the peer's 4096", got)
	}
	received := p.batches.Load()
	if _, err := c.Replicate(ctx, batch("x", 1, 8192)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("the next 8 KiB batch → %v, want too large", err)
	}
	if _, err := c.Replicate(ctx, batch("x", 1, 1)); err != nil {
		t.Fatalf("a small batch after it → %v", err)
	}
	if got := p.batches.Load(); got != received+1 {
		t.Errorf("%d batches reached the peer after the refusal, want 1 (the big one refused before sending)", got-received)
	}
}

// holdingPeer serves ReplicateStream as a receiver that holds answers: a batch sent
// with a hold is answered only in the ok_seqs of the next batch sent without one.
// Each request's hold is recorded, and held is signalled per held batch.
type holdingPeer struct {
	fanoutv1.UnimplementedPeerServiceServer
	mu    sync.Mutex
	holds map[string]uint32 // by the batch's origin: its answer_hold_micros
	held  chan string       // the origin of each batch held
}

func (p *holdingPeer) ReplicateStream(stream fanoutv1.PeerService_ReplicateStreamServer) error {
	var held []uint64
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		p.mu.Lock()
		p.holds[req.Batch.OriginNode] = req.AnswerHoldMicros
		p.mu.Unlock()
		if req.AnswerHoldMicros > 0 {
			held = append(held, req.Seq)
			p.held <- req.Batch.OriginNode
			continue
		}
		resp, _ := okAnswer(req.Batch)
		resp.NodeId, resp.Incarnation = "peer", 7
		if err := stream.Send(&fanoutv1.ReplicateStreamResponse{Seq: req.Seq, Result: resp, OkSeqs: held}); err != nil {
			return err
		}
		held = nil
	}
}

// TestStreamHeldAnswers: with AnswerHold, a batch that may be held is sent with the
// hold unless MaxHeld held batches are in flight (then without, and its answer brings
// theirs) or none went without one lately (the first on a stream goes without); a held
// batch's answer, from ok_seqs, is every status OK from the peer as it last named
// itself; Recall sends an empty batch without a hold that brings the held answers,
// only while some are held; a batch that may not be held, or a Conn without
// AnswerHold, never is.
func TestStreamHeldAnswers(t *testing.T) {
	p := &holdingPeer{holds: make(map[string]uint32), held: make(chan string, 8)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(frame.ServerOptions()...)
	fanoutv1.RegisterPeerServiceServer(srv, p)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c := dialT(t, lis.Addr().String(), Options{AnswerHold: 50 * time.Millisecond, MaxHeld: 2})
	c.promptEvery = time.Hour // no batch goes without a hold for lack of one lately
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	type result struct {
		origin string
		resp   *fanoutv1.ReplicateResponse
		held   bool
		err    error
	}
	send := func(origin string, events int, mayHold bool) result {
		b, err := proto.Marshal(batch(origin, events, 1))
		if err != nil {
			t.Fatal(err)
		}
		resp, held, err := c.ReplicateFrame(ctx, &frame.Frame{B: b}, events, mayHold)
		return result{origin, resp, held, err}
	}
	check := func(r result, wantHeld bool, events int) {
		t.Helper()
		if r.err != nil || r.held != wantHeld {
			t.Fatalf("%s: held %v, %v; want held %v", r.origin, r.held, r.err, wantHeld)
		}
		if len(r.resp.Statuses) != events || r.resp.NodeId != "peer" || r.resp.Incarnation != 7 {
			t.Fatalf("%s: answer %v, want %d statuses from peer 7", r.origin, r.resp, events)
		}
		for _, s := range r.resp.Statuses {
			if s != fanoutv1.ItemStatus_ITEM_STATUS_OK {
				t.Fatalf("%s: answer %v, want every status OK", r.origin, r.resp)
			}
		}
	}
	check(send("a", 1, true), false, 1) // the first on the stream: at once

	results := make(chan result, 2)
	go func() { results <- send("b", 3, true) }()
	go func() { results <- send("c", 2, true) }()
	for range 2 {
		select {
		case <-p.held:
		case <-ctx.Done():
			t.Fatal("b and c were not held")
		}
	}
	check(send("d", 1, true), false, 1) // two held already: this one brings them
	for range 2 {
		r := <-results
		check(r, true, map[string]int{"b": 3, "c": 2}[r.origin])
	}
	check(send("e", 2, false), false, 2)

	// Held again, then recalled (a task waits for one of them): an empty batch
	// without a hold brings their answers; nothing else is sent.
	go func() { results <- send("f", 1, true) }()
	go func() { results <- send("g", 1, true) }()
	for range 2 {
		select {
		case <-p.held:
		case <-ctx.Done():
			t.Fatal("f and g were not held")
		}
	}
	c.Recall("recall")
	for range 2 {
		check(<-results, true, 1)
	}
	c.Recall("recall") // nothing held: no batch
	p.mu.Lock()
	if len(p.holds) != 8 {
		t.Errorf("the peer saw batches from %v, want a..g and one recall", p.holds)
	}
	for origin, want := range map[string]uint32{"a": 0, "b": 50000, "c": 50000, "d": 0, "e": 0, "f": 50000, "g": 50000, "recall": 0} {
		if got := p.holds[origin]; got != want {
			t.Errorf("%s sent with answer_hold_micros %d, want %d", origin, got, want)
		}
	}
	p.mu.Unlock()

	none := dialT(t, lis.Addr().String(), Options{MaxHeld: 2}) // no AnswerHold
	none.promptEvery = time.Hour
	b, _ := proto.Marshal(batch("f", 1, 1))
	for range 3 {
		if _, held, err := none.ReplicateFrame(ctx, &frame.Frame{B: b}, 1, true); err != nil || held {
			t.Fatalf("without AnswerHold: held %v, %v", held, err)
		}
	}
}
