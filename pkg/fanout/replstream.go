package fanout

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
)

// ReplicateStream is one peer's replicate stream (PeerService.ReplicateStream) as the
// node serves it: the batches of one peer connection, answered one by one in the
// order they arrive. The edge implements it over its transport (pkg/grpcapi over a
// gRPC stream, where the limit is a header and a failure is a status code).
type ReplicateStream interface {
	// Context is the stream's: it ends when the stream does.
	Context() context.Context
	// Limit tells the sender, before any answer, the largest request the listener
	// takes (the edge knows it: pkg/grpcapi has it from the mesh), so that it splits a
	// batch before sending it rather than losing the stream to a refusal.
	Limit() error
	// Recv appends the next request's bytes (a ReplicateStreamRequest) to b[:0] and
	// returns them, or io.EOF once the sender has closed the stream.
	Recv(b []byte) ([]byte, error)
	// Answer sends the answer to the batch under seq: resp, or the batch's failure
	// err (the node's error; the edge says it as Replicate's would be said), and
	// okSeqs, held batches stored with every event OK (peer.proto's ok_seqs). seq 0
	// with ErrShuttingDown is the goodbye: the node is closing and asks the sender to
	// close the stream. seq 0 with neither err is okSeqs alone, resp naming the
	// receiver (node id and incarnation). The node never calls Answer concurrently,
	// and okSeqs is the node's again once Answer returns.
	Answer(seq uint64, resp *fanoutv1.ReplicateResponse, err error, okSeqs []uint64) error
}

// maxAnswerHold caps a request's answer_hold_micros: a sender may ask for less. 100 ms
// bounds what a receiver keeps per stream and how late a sender hears of a batch.
const maxAnswerHold = 100 * time.Millisecond

// maxHeldAnswers is how many answers a stream holds at most: the next one to hold
// sends them all. A sender holds fewer (its workers less one: peer.proto).
const maxHeldAnswers = 1024

// heldAnswers are a stream's answers held back (answer_hold_micros): batches stored
// with every event OK whose sender said no acknowledgement waits on them. They go with
// the next answer sent, or on their own once the first has waited its hold.
//
// Invariants (under mu, which also serializes every Answer on the stream): timer is
// armed (and counted in wg) exactly while seqs is not empty and no answer has sent
// them; a timer's function sends only if gen is still the one it was armed with.
type heldAnswers struct {
	s  ReplicateStream
	mu sync.Mutex
	wg sync.WaitGroup // armed timers' functions

	seqs  []uint64
	id    *fanoutv1.ReplicateResponse // node id and incarnation, for seqs sent alone
	timer *time.Timer
	gen   uint64
}

// answerLocked sends an answer (seq 0 without err: the held ones alone, if any) with
// every held one, and disarms the timer; the caller holds h.mu.
func (h *heldAnswers) answerLocked(seq uint64, resp *fanoutv1.ReplicateResponse, err error) error {
	if h.timer != nil {
		if h.timer.Stop() {
			h.wg.Done()
		}
		h.timer = nil
	}
	h.gen++
	if seq == 0 && err == nil && len(h.seqs) == 0 {
		return nil // nothing held
	}
	aerr := h.s.Answer(seq, resp, err, h.seqs)
	h.seqs = h.seqs[:0]
	return aerr
}

// answer is answerLocked under h.mu.
func (h *heldAnswers) answer(seq uint64, resp *fanoutv1.ReplicateResponse, err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.answerLocked(seq, resp, err)
}

// hold keeps the answer of seq (resp: every event OK) for at most d.
func (h *heldAnswers) hold(seq uint64, resp *fanoutv1.ReplicateResponse, d time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.id == nil {
		h.id = &fanoutv1.ReplicateResponse{NodeId: resp.GetNodeId(), Incarnation: resp.GetIncarnation()}
	}
	h.seqs = append(h.seqs, seq)
	if len(h.seqs) >= maxHeldAnswers {
		return h.answerLocked(0, h.id, nil)
	}
	if h.timer == nil {
		gen := h.gen
		h.wg.Add(1)
		h.timer = time.AfterFunc(d, func() {
			defer h.wg.Done()
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.gen == gen {
				h.timer = nil                    // fired: nothing to stop
				_ = h.answerLocked(0, h.id, nil) // a broken stream ends Recv too
			}
		})
	}
	return nil
}

// stop sends what is held (when send) and waits for a timer's function under way.
func (h *heldAnswers) stop(send bool) error {
	h.mu.Lock()
	var err error
	if send {
		err = h.answerLocked(0, h.id, nil)
	} else if h.timer != nil {
		if h.timer.Stop() {
			h.wg.Done()
		}
		h.timer = nil
		h.gen++
	}
	h.mu.Unlock()
	h.wg.Wait()
	return err
}

// allOK reports whether every event of a batch was stored as OK.
func allOK(resp *fanoutv1.ReplicateResponse) bool {
	for _, st := range resp.GetStatuses() {
		if st != fanoutv1.ItemStatus_ITEM_STATUS_OK {
			return false
		}
	}
	return true
}

// ServeReplicateStream runs one replicate stream from the peer from until the sender
// closes it (nil), it breaks (the error of s, as it is), or the node closes. Each
// batch is answered as Replicate would answer it (peer.proto): a batch that fails is
// answered with its error and the stream goes on; bytes that are no
// ReplicateStreamRequest end the stream with an *InvalidError (the sender is broken,
// not one of its batches); a draining node takes no stream (ErrShuttingDown). The
// batches are read with internal/wire, as ReplicateBytes reads a unary one. A batch
// sent with answer_hold_micros and stored with every event OK is not answered at once
// (heldAnswers): its seq goes with the next answer, or alone once it has waited its
// hold, which saves the stream a message each way per batch.
func (n *Node) ServeReplicateStream(s ReplicateStream, from Caller) error {
	if n.draining.Load() {
		return ErrShuttingDown
	}
	if err := s.Limit(); err != nil {
		return err
	}
	h := &heldAnswers{s: s} // the answers, held ones and the goodbye share the stream
	// When the node closes, the sender is told to close the stream (seq 0 with
	// ErrShuttingDown), which ends Recv below: nothing else can end a Recv but the
	// stream itself. context.AfterFunc starts a goroutine only then, so an open
	// stream costs none; ServeReplicateStream waits for it if it started.
	goodbye := make(chan struct{})
	stop := context.AfterFunc(n.ctx, func() {
		defer close(goodbye)
		_ = h.answer(0, nil, ErrShuttingDown)
	})
	defer func() {
		if !stop() {
			<-goodbye
		}
	}()

	ctx := s.Context()
	var b []byte // one request's bytes; reused
	var req wire.Replicate
	for {
		var err error
		if b, err = s.Recv(b[:0]); err != nil {
			if errors.Is(err, io.EOF) {
				return h.stop(true) // the sender closed the stream: what is held goes now
			}
			h.stop(false)
			return err
		}
		req = wire.Replicate{Events: req.Events[:0], Submitted: req.Submitted[:0]}
		head, err := wire.ParseReplicateStream(b, &req)
		if err != nil {
			h.stop(false)
			return errNotProtobuf
		}
		resp, err := n.replicateParsed(ctx, from, &req)
		if head.HoldMicros > 0 && err == nil && allOK(resp) {
			err = h.hold(head.Seq, resp, min(time.Duration(head.HoldMicros)*time.Microsecond, maxAnswerHold))
		} else {
			err = h.answer(head.Seq, resp, err)
		}
		if err != nil {
			h.stop(false)
			return err
		}
	}
}
