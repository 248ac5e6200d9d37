package fanout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
)

// ErrCompacted: a Subscribe asked to resume from, or fell behind, a revision the
// state table can no longer resume from. The client should subscribe with a snapshot.
var ErrCompacted = errors.New("fanout: revision compacted; subscribe with snapshot to start over")

// Bounds of one Subscribe stream's messages.
const (
	// defaultBatchBytes caps a response when the request sets no max_batch_bytes:
	// 1 MiB, a quarter of the 4 MiB gRPC clients accept by default. An entry bigger
	// than the cap goes alone, in a message of at most Limits.EntryBytes: with the
	// default --max-event-bytes that is 1 MiB + 19 KiB, so a client that keeps gRPC's
	// default receive limit reads every message (New warns when the limits break
	// that).
	defaultBatchBytes = 1 << 20
	// defaultClientRecvBytes is gRPC's default receive limit of a client.
	defaultClientRecvBytes = 4 << 20
	// maxBatchBytes is the largest max_batch_bytes a request may ask for.
	maxBatchBytes = 64 << 20
)

// Subscribe is list+watch over the state table. It sends, through send,
// the snapshot or the resumed changes the request asks for, then every change as it
// happens, each entry at its latest: a reader that falls behind reads the latest state
// of each key, not its history, and holds nothing up. send gets the bytes of one
// SubscribeResponse, which it may not keep. It returns when ctx ends (ctx.Err()), the node closes (ErrClosed), send fails,
// or the stream falls behind the tombstone horizon (ErrCompacted).
//
// A snapshot waits, before it reads anything, until the node's bootstrap has ended
// (Ready), unless the request sets allow_unsynced: the table is half-synced before,
// and an app that builds its cache from the snapshot would see keys vanish or go
// back to older versions than it saw before the node restarted.
func (n *Node) Subscribe(ctx context.Context, req *fanoutv1.SubscribeRequest, send func([]byte) error) error {
	if err := n.validateSubscribe(req); err != nil {
		return err
	}
	// A stream counts in GetStatus's subscribers once every change after that moment
	// reaches it, so that a client may confirm a live-only stream by the count before
	// it writes: from upTo below. A snapshot covers every change before upTo too, so a
	// snapshot stream counts from the start, while it waits for the bootstrap.
	counted := req.GetSnapshot()
	if counted {
		n.subscribers.Add(1)
		defer n.subscribers.Add(-1)
	}
	if req.GetSnapshot() && !req.GetAllowUnsynced() {
		if err := n.waitBootstrap(ctx); err != nil {
			return err
		}
	}
	if from := req.GetFromRevision(); from != 0 {
		if err := n.table.CheckResume(from); err != nil {
			return fmt.Errorf("%w (from_revision: %v)", ErrCompacted, err)
		}
	}
	w := n.newWatch(req, send)
	// The catch-up part (a snapshot, or the changes since from_revision) ends at the
	// revision of now; the live part follows from there: every change after this
	// point reaches the stream.
	upTo := n.table.Revision()
	if !counted {
		n.subscribers.Add(1)
		defer n.subscribers.Add(-1)
	}
	switch {
	case req.GetSnapshot():
		s := w.scanFrom(0, upTo, false, w.keepPrefix)
		if err := w.drain(ctx, &s); err != nil {
			return err
		}
		w.msg = wire.AppendSnapshotComplete(w.msg[:0])
		if err := send(w.msg); err != nil {
			return err
		}
	case req.GetFromRevision() != 0:
		s := w.scanFrom(req.GetFromRevision(), upTo, true, w.keepPrefix)
		if err := w.drain(ctx, &s); err != nil {
			return err
		}
	}
	keep := w.keepPrefix
	if !req.GetIncludeOwn() {
		keep = w.keepOthers
	}
	live := w.scanFrom(upTo, 0, true, keep)
	return w.follow(ctx, &live)
}

// SubscribersChanged is closed when the number of open Subscribe streams (GetStatus's
// subscribers) changes after the call: a caller that confirms a live-only stream by
// the count (see Subscribe) waits on it instead of asking again and again. Ask for
// it again after each close.
func (n *Node) SubscribersChanged() <-chan struct{} { return n.subscribers.changed() }

// streamCount is the number of open Subscribe streams, with a channel closed at each
// change for those who wait for one (SubscribersChanged).
type streamCount struct {
	n  atomic.Int64
	mu sync.Mutex
	// ch is closed and cleared at each change; made by the first waiter after it, so
	// that nobody waiting costs nothing but the lock. Guarded by mu.
	ch chan struct{}
}

// Add changes the count by d and wakes the waiters.
func (c *streamCount) Add(d int64) {
	c.n.Add(d)
	c.mu.Lock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	c.mu.Unlock()
}

// Load is the count.
func (c *streamCount) Load() int64 { return c.n.Load() }

// changed is closed at the next change of the count.
func (c *streamCount) changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// waitBootstrap waits until the node's bootstrap has ended (Ready), ctx ends (its
// error, saying what the stream waited for) or the node closes (ErrClosed).
func (n *Node) waitBootstrap(ctx context.Context) error {
	select {
	case <-n.Ready():
		return nil
	case <-ctx.Done():
		_, reason := n.tr.Readiness()
		return fmt.Errorf("fanout: a snapshot waits until this node has synced with its peers (%s), and the call ended first "+
			"(set allow_unsynced to read the table as it is): %w", reason, ctx.Err())
	case <-n.ctx.Done():
		return ErrClosed
	}
}

func (n *Node) validateSubscribe(req *fanoutv1.SubscribeRequest) error {
	l := n.cfg.Limits
	switch p := req.GetTaskIdPrefix(); {
	case len(p) > l.MaxTaskIDBytes:
		return invalid("task_id_prefix", "%d bytes, at most %d", len(p), l.MaxTaskIDBytes)
	case !utf8.ValidString(p):
		return invalid("task_id_prefix", "not valid UTF-8")
	}
	if mb := req.GetMaxBatch(); mb > uint32(l.MaxEvents) {
		return invalid("max_batch", "%d, at most %d", mb, l.MaxEvents)
	}
	if mb := req.GetMaxBatchBytes(); mb > maxBatchBytes {
		return invalid("max_batch_bytes", "%d, at most %d", mb, maxBatchBytes)
	}
	if req.GetSnapshot() && req.GetFromRevision() != 0 {
		return invalid("from_revision", "set with snapshot: a snapshot starts from the current state, a resume from a revision; choose one")
	}
	return nil
}

// watch is one Subscribe stream's reading state. Only the stream's goroutine uses it.
type watch struct {
	n      *Node
	prefix []byte
	self   string
	send   func([]byte) error
	buf    []state.Entry
	msg    []byte // the message being sent; reused
	// The limits of every scan of this stream (one response's entries and bytes).
	maxEntries, maxBytes int
}

func (n *Node) newWatch(req *fanoutv1.SubscribeRequest, send func([]byte) error) *watch {
	maxEntries := max(1, int(req.GetMaxBatch()))
	maxBytes := int(req.GetMaxBatchBytes())
	if maxBytes == 0 {
		maxBytes = defaultBatchBytes
	}
	return &watch{n: n, prefix: []byte(req.GetTaskIdPrefix()), self: n.cfg.NodeID, send: send,
		// One more than a response takes: Table.Next reads the entry past a full
		// response before it gives it back.
		buf: make([]state.Entry, 0, min(maxEntries, 1024)+1), maxEntries: maxEntries, maxBytes: maxBytes}
}

// scanFrom is a scan of this stream after revision after (up to upTo if not 0), with
// the stream's limits, measured as batch items.
func (w *watch) scanFrom(after, upTo uint64, deletions bool, keep func(*state.Entry) bool) state.Scan {
	return state.Scan{After: after, UpTo: upTo, Deletions: deletions, Keep: keep,
		MaxEntries: w.maxEntries, MaxBytes: w.maxBytes, Cost: batchItemSize}
}

func (w *watch) keepPrefix(e *state.Entry) bool { return bytes.HasPrefix(e.Key, w.prefix) }

func (w *watch) keepOthers(e *state.Entry) bool {
	return e.Stamp.Origin != w.self && bytes.HasPrefix(e.Key, w.prefix)
}

// drain sends everything s reads until it reaches its end.
func (w *watch) drain(ctx context.Context, s *state.Scan) error {
	for !w.n.table.Done(s) {
		if err := w.step(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// follow sends what s reads, and waits for changes whenever it has read everything.
func (w *watch) follow(ctx context.Context, s *state.Scan) error {
	for {
		select {
		case <-w.n.table.Changed(s.After):
		case <-ctx.Done():
			return ctx.Err()
		case <-w.n.ctx.Done():
			return ErrClosed
		}
		if err := w.drain(ctx, s); err != nil {
			return err
		}
	}
}

// step reads one batch of s and sends it.
func (w *watch) step(ctx context.Context, s *state.Scan) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	batch, err := w.n.table.Next(s, w.buf[:0])
	if err != nil {
		return fmt.Errorf("%w (this stream fell behind: %v)", ErrCompacted, err)
	}
	if len(batch) == 0 {
		return nil
	}
	if len(batch) == 1 {
		w.msg = wire.AppendEntry(w.msg[:0], wireEntry(&batch[0]))
	} else {
		w.msg = appendBatch(w.msg[:0], batch)
	}
	clear(batch)      // drop the arena references for the GC
	w.buf = batch[:0] // the next step reuses what this one grew
	if err := w.send(w.msg); err != nil {
		return err
	}
	w.n.delivered.Add(uint64(len(batch)))
	return nil
}
