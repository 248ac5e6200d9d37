package fanout

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/fanout/fanout/internal/wire"
)

// maxStreamWaits bounds the ack-waiting requests one SubmitStream may have open at
// once; past it, reading the stream pauses (flow control pushes back on the client).
const maxStreamWaits = 1024

// ServeSubmitStream runs one SubmitStream: one answer per request, matched by
// request_id. recv appends the next request's bytes to b[:0] and returns them, or
// io.EOF once the client has closed the stream; send sends one SubmitResponse's bytes
// (it must not keep them: the node reuses the buffer once send returns, and never
// calls send concurrently). Requests that wait for acks run concurrently and are
// answered in completion order; QUEUED requests are answered in order as they are
// read (with a Store, each once it is on disk: the next requests are applied
// meanwhile, so the requests in flight share commits). A bad request ends the stream
// with its error (an *InvalidError naming the field). An error of recv other than
// io.EOF ends the stream and is returned as it is; every other error is the node's
// (an error of send among them, as the answer's failure).
func (n *Node) ServeSubmitStream(ctx context.Context, recv func(b []byte) ([]byte, error), send func([]byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &streamWaits{send: send, node: n, sem: make(chan struct{}, maxStreamWaits)}
	defer w.stopTimer() // very last: nothing arms it after the flush below
	defer w.flush()     // what the window holds, after the ordered answers
	defer w.wg.Wait()
	defer w.closeOrdered()
	var b []byte // reused, except by a request that waits (below)
	for {
		var err error
		b, err = recv(b[:0])
		if errors.Is(err, io.EOF) {
			w.closeOrdered()
			w.wg.Wait()
			return w.failed()
		}
		if err != nil {
			return err
		}
		if err := w.failed(); err != nil {
			return err
		}
		c := n.getCall()
		if err := n.readSubmit(b, c); err != nil {
			n.putCall(c)
			return err
		}
		if c.req.Hold > 0 { // window_answers with a deadline (inWindow arms it)
			c.req.Window = true
		}
		switch {
		case n.waitsForAcks(c): // answered on completion, alone
			if !c.req.Window {
				if err = w.flushBehind(ctx); err != nil {
					n.putCall(c)
					return err
				}
			}
			b = nil // c's events are b's bytes until c is done
			err = w.start(ctx, func() error {
				defer n.putCall(c)
				if err := n.submitChecked(ctx, c); err != nil {
					return err
				}
				return w.answer(c)
			})
		case n.persist != nil: // answered in order, once on disk
			if err = n.submitQueued(ctx, c); err == nil {
				err = w.inOrder(ctx, c) // c's events are not read after prepare
			}
		default: // answered in order, as read
			if err = n.submitQueued(ctx, c); err == nil {
				err = w.inWindow(c)
			}
			n.putCall(c)
		}
		if err != nil {
			return err
		}
	}
}

// streamWaits runs the ack-waiting requests of one SubmitStream. ServeSubmitStream
// starts them and waits for all before returning; send is serialized by mu.
type streamWaits struct {
	send func([]byte) error
	node *Node
	sem  chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error  // guarded by mu: the first failure
	out  []byte // guarded by mu: the answer being sent
	// win holds the answers of window_answers requests not sent yet, encoded
	// without request_id and satisfied; winIDs their request ids, in order; winSat
	// whether every one was satisfied. Guarded by mu. Invariant: len(winIDs) <
	// maxWindowRequests and len(win) < maxWindowBytes between calls.
	win    []byte
	winIDs []uint64
	winSat bool
	// timer sends the window once its first answer with a hold (answer_hold_micros)
	// has waited that long. Guarded by mu. Invariant: armed (and counted in timers)
	// exactly while the window holds an answer with a hold; a timer's function sends
	// only if timerGen is still the one it was armed with.
	timer    *time.Timer
	timerGen uint64
	timers   sync.WaitGroup
	// ordered feeds inOrder's goroutine; nil until the first use and after
	// closeOrdered. Used by ServeSubmitStream's goroutine only.
	ordered chan *submitCall
}

func (w *streamWaits) start(ctx context.Context, f func() error) error {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		if err := f(); err != nil {
			w.fail(err)
		}
	}()
	return nil
}

// inOrder queues c's answer to be sent, after the answers queued before it, once its
// events are on disk (Node.durable); one goroutine, started on first use, does that,
// and gives c back to the node.
func (w *streamWaits) inOrder(ctx context.Context, c *submitCall) error {
	if w.ordered == nil {
		ch := make(chan *submitCall, maxStreamWaits)
		w.ordered = ch
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for c := range ch {
				if c == flushMark {
					if err := w.flush(); err != nil {
						w.fail(err)
						for range ch {
						}
						return
					}
					continue
				}
				err := w.node.durable(ctx, c.revision)
				if err == nil {
					err = w.inWindow(c)
				}
				w.node.putCall(c)
				if err != nil {
					w.fail(err)
					for range ch { // the stream ends: drop the rest
					}
					return
				}
			}
		}()
	}
	select {
	case w.ordered <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeOrdered ends inOrder's goroutine once it has sent what is queued. Idempotent.
func (w *streamWaits) closeOrdered() {
	if w.ordered != nil {
		close(w.ordered)
		w.ordered = nil
	}
}

func (w *streamWaits) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// answer sends c's answer alone. Its bytes are written into one buffer the stream
// reuses: send may not keep them (the edge's codec copies them before it returns).
func (w *streamWaits) answer(c *submitCall) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out = wire.AppendSubmitResponse(w.out[:0], &c.resp)
	return w.send(w.out)
}

// Bounds of a window of answers (window_answers): an answer of this many requests,
// or this many bytes, is sent at once. 1 MiB is a quarter of a gRPC client's default
// receive limit.
const (
	maxWindowRequests = 1000
	maxWindowBytes    = 1 << 20
)

// flushMark, queued to inOrder's goroutine, sends what the window holds once the
// answers queued before it are in it.
var flushMark = new(submitCall)

// inWindow answers c, an in-order request: held in the window if it set
// window_answers (sent when the window is full), else sent with whatever the window
// holds, in one answer.
func (w *streamWaits) inWindow(c *submitCall) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !c.req.Window && len(w.winIDs) == 0 {
		w.out = wire.AppendSubmitResponse(w.out[:0], &c.resp)
		return w.send(w.out)
	}
	// Held: its fields but request_id and satisfied, which the window's answer
	// writes once (repeated fields concatenate when protobuf reads them).
	id, sat := c.resp.RequestID, c.resp.Satisfied
	c.resp.RequestID, c.resp.Satisfied = 0, false
	w.win = wire.AppendSubmitResponse(w.win, &c.resp)
	c.resp.RequestID, c.resp.Satisfied = id, sat
	w.winSat = sat && (len(w.winIDs) == 0 || w.winSat)
	w.winIDs = append(w.winIDs, id)
	if c.req.Window && len(w.winIDs) < maxWindowRequests && len(w.win) < maxWindowBytes {
		if c.req.Hold > 0 && w.timer == nil {
			gen := w.timerGen
			w.timers.Add(1)
			w.timer = time.AfterFunc(min(c.req.Hold, maxSubmitHold), func() {
				defer w.timers.Done()
				w.mu.Lock()
				defer w.mu.Unlock()
				if w.timerGen == gen {
					w.timer = nil // fired: nothing to stop
					if err := w.flushLocked(); err != nil && w.err == nil {
						w.err = err // the stream's next read sees it
					}
				}
			})
		}
		return nil
	}
	return w.flushLocked()
}

// maxSubmitHold caps a request's answer_hold_micros: how long a held answer waits.
const maxSubmitHold = 100 * time.Millisecond

// stopTimer disarms the window's timer and waits for its function if it is running.
func (w *streamWaits) stopTimer() {
	w.mu.Lock()
	w.disarmLocked()
	w.mu.Unlock()
	w.timers.Wait()
}

// disarmLocked stops the window's timer: a function already under way sends nothing.
// w.mu is held.
func (w *streamWaits) disarmLocked() {
	if w.timer != nil {
		if w.timer.Stop() {
			w.timers.Done()
		}
		w.timer = nil
	}
	w.timerGen++
}

// flush sends what the window holds, if anything.
func (w *streamWaits) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

// flushBehind sends what the window holds once every in-order answer read before
// now is in it: at once without a data dir, else after the answers waiting for the
// disk (through inOrder's goroutine).
func (w *streamWaits) flushBehind(ctx context.Context) error {
	if w.ordered == nil {
		return w.flush()
	}
	select {
	case w.ordered <- flushMark:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flushLocked sends the window's answer: the held answers, then the last request's
// id, satisfied if every one was, and the ids of all (one alone: none). w.mu is held.
func (w *streamWaits) flushLocked() error {
	w.disarmLocked()
	if len(w.winIDs) == 0 {
		return nil
	}
	tail := wire.SubmitResponse{RequestID: w.winIDs[len(w.winIDs)-1], Satisfied: w.winSat}
	if len(w.winIDs) > 1 {
		tail.RequestIDs = w.winIDs
	}
	w.out = wire.AppendSubmitResponse(append(w.out[:0], w.win...), &tail)
	w.win, w.winIDs = w.win[:0], w.winIDs[:0]
	return w.send(w.out)
}

func (w *streamWaits) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
