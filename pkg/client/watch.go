package client

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EventType is the kind of a WatchEvent.
type EventType int

const (
	// EventPut: the key has a new value (Entry), a newer version than any delivered.
	EventPut EventType = iota + 1
	// EventDelete: the key was deleted (Entry.Deleted is set).
	EventDelete
	// EventSynced: the first snapshot is complete: every key under the prefix has
	// been delivered. Sent once per Watch.
	EventSynced
)

func (t EventType) String() string {
	switch t {
	case EventPut:
		return "PUT"
	case EventDelete:
		return "DELETE"
	case EventSynced:
		return "SYNCED"
	}
	return "EventType(?)"
}

// WatchEvent is one change delivered by a Watch.
type WatchEvent struct {
	Type  EventType
	Entry Entry
	// Inferred marks a Delete the Watch inferred rather than read: after it had to
	// take a new snapshot (the sidecar could not resume the stream: it restarted, or
	// the stream fell behind its tombstone horizon), the key was not in it, so it was
	// deleted while the stream was down. Entry is then the last state delivered with
	// Deleted set; the tombstone's own version is unknown.
	Inferred bool
}

// WatchOption configures a Watch (and a Cache).
type WatchOption func(*watchOptions)

type watchOptions struct {
	excludeOwn    bool
	allowUnsynced bool
	maxBatch      uint32
	onRetry       func(error)
}

// WithExcludeOwn leaves out of the live part the writes of apps on this sidecar (the
// API's include_own false). By default a Watch sees every write, its own app's too.
func WithExcludeOwn() WatchOption { return func(o *watchOptions) { o.excludeOwn = true } }

// WithAllowUnsynced takes the snapshots without waiting for a sidecar that has just
// started to sync with its peers. Not for a cache: see SubscribeRequest.allow_unsynced.
func WithAllowUnsynced() WatchOption { return func(o *watchOptions) { o.allowUnsynced = true } }

// WithMaxBatch sets the Subscribe max_batch (default 256; 1 to 10000).
func WithMaxBatch(n int) WatchOption { return func(o *watchOptions) { o.maxBatch = uint32(n) } }

// WithOnRetry calls f with the error of each broken stream the Watch resumes after
// (for logs and metrics). f runs in the goroutine calling Next.
func WithOnRetry(f func(error)) WatchOption { return func(o *watchOptions) { o.onRetry = f } }

// mark is the last state of a key the Watch delivered (or learnt deleted).
type mark struct {
	version uint64
	origin  string
	deleted bool
}

// Watch lists then watches the keys under a prefix, and resumes by itself. Its
// caller sees each key's states in rising version order, each at most once, and
// never a state older than one already delivered: a resumed stream's repeats are
// left out, and after a new snapshot only the differences are delivered. Next must be
// called from one goroutine at a time.
type Watch struct {
	c      *Client
	prefix string
	o      watchOptions
	ctx    context.Context
	cancel context.CancelCauseFunc

	stream     grpc.ServerStreamingClient[fanoutv1.SubscribeResponse]
	known      map[string]mark
	rev        uint64 // the revision of the last entry read on the current node's stream
	synced     bool   // the first snapshot completed
	snapshot   bool   // the current stream is in its snapshot part
	seen       map[string]struct{}
	needSnap   bool // the next stream must be a snapshot
	queue      []WatchEvent
	fails      int // consecutive failures without an entry read
	streams    atomic.Uint64
	snapshots  atomic.Uint64
	outOfRange atomic.Uint64
}

// WatchStats counts a Watch's streams.
type WatchStats struct {
	// Streams counts the Subscribe streams opened; Snapshots those that were
	// snapshots (the first, and each after OUT_OF_RANGE or a break mid-snapshot).
	Streams, Snapshots uint64
	// OutOfRange counts the resumes the sidecar refused with OUT_OF_RANGE.
	OutOfRange uint64
}

// Watch starts a watch of the keys under prefix ("" watches every key): a Subscribe
// with a snapshot, then live changes. A stream that breaks is resumed from the last
// revision read; a resume the sidecar refuses (OUT_OF_RANGE: a restarted sidecar,
// whose revisions are its process's, or one that has forgotten the tombstones of that
// time) takes a new snapshot and delivers only what differs from what was delivered.
// Between attempts it pauses 50ms, doubling up to WithMaxBackoff. It gives up only on
// errors retrying cannot cure (INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED,
// UNIMPLEMENTED), when ctx ends or on Close.
//
// The Watch remembers the version of every key it has delivered (deleted keys too),
// so its memory grows with the keys under the prefix.
func (c *Client) Watch(ctx context.Context, prefix string, opts ...WatchOption) *Watch {
	o := watchOptions{maxBatch: 256}
	for _, f := range opts {
		f(&o)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	return &Watch{c: c, prefix: prefix, o: o, ctx: wctx, cancel: cancel, known: make(map[string]mark), needSnap: true}
}

// Close ends the watch; Next then returns ErrClosed.
func (w *Watch) Close() { w.cancel(ErrClosed) }

// Stats returns the watch's counters. Safe from any goroutine.
func (w *Watch) Stats() WatchStats {
	return WatchStats{Streams: w.streams.Load(), Snapshots: w.snapshots.Load(), OutOfRange: w.outOfRange.Load()}
}

// Next returns the next event. It blocks until there is one, and returns an error
// only when the watch ends: ctx's error, ErrClosed, or an *Error that retrying
// cannot cure.
func (w *Watch) Next() (WatchEvent, error) {
	for len(w.queue) == 0 {
		if err := w.step(); err != nil {
			return WatchEvent{}, err
		}
	}
	ev := w.queue[0]
	w.queue[0] = WatchEvent{}
	w.queue = w.queue[1:]
	return ev, nil
}

// step reads one response (opening a stream first if there is none) and queues what
// it delivers.
func (w *Watch) step() error {
	if w.stream == nil {
		if err := w.open(); err != nil || w.stream == nil {
			return err // nil: the open failed, and the next step tries again
		}
	}
	resp, err := w.stream.Recv()
	if err != nil {
		return w.broken(err)
	}
	w.fails = 0
	if resp.GetSnapshotComplete() {
		w.snapshotComplete()
		return nil
	}
	if b := resp.GetBatch(); len(b) > 0 {
		for _, e := range b {
			w.take(entry(e))
		}
		return nil
	}
	if resp.GetEvent() != nil {
		w.take(fromEvent(resp.GetEvent(), resp.GetOriginNode(), resp.GetRevision(), asTime(resp.GetSubmittedAt())))
	}
	return nil
}

func (w *Watch) open() error {
	if err := w.ctx.Err(); err != nil {
		return w.ended()
	}
	req := &fanoutv1.SubscribeRequest{
		TaskIdPrefix: w.prefix, MaxBatch: w.o.maxBatch, IncludeOwn: !w.o.excludeOwn, AllowUnsynced: w.o.allowUnsynced,
	}
	// A resume needs a revision of this node's: one read on a stream of it. Without
	// one (an empty snapshot, then a break), only a snapshot is sure to miss nothing.
	if w.needSnap || w.rev == 0 {
		req.Snapshot = true
	} else {
		req.FromRevision = w.rev
	}
	s, err := w.c.api.Subscribe(w.ctx, req)
	if err != nil {
		return w.broken(err)
	}
	w.streams.Add(1)
	w.stream = s
	if req.Snapshot {
		w.snapshots.Add(1)
		w.snapshot = true
		w.seen = make(map[string]struct{})
		w.rev = 0
	}
	return nil
}

// ended is the error of a watch whose context is done: ErrClosed after Close, else
// the context's error.
func (w *Watch) ended() error {
	if errors.Is(context.Cause(w.ctx), ErrClosed) {
		return ErrClosed
	}
	return w.ctx.Err()
}

// broken handles the error of a stream (or of opening one): it ends the watch, or
// prepares the next attempt.
func (w *Watch) broken(err error) error {
	w.stream = nil
	if w.ctx.Err() != nil {
		return w.ended()
	}
	code := status.Code(err)
	if errors.Is(err, io.EOF) {
		code = codes.Unavailable // the sidecar ended the stream: it is shutting down
	}
	switch code {
	case codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented:
		return wrap("watch", w.prefix, err)
	case codes.OutOfRange:
		w.outOfRange.Add(1)
		w.needSnap = true
	}
	if w.snapshot {
		w.needSnap = true // a snapshot cut short is taken again
	}
	if w.o.onRetry != nil {
		w.o.onRetry(wrap("watch", w.prefix, err))
	}
	w.fails++
	if code == codes.OutOfRange && w.fails == 1 {
		return nil // a new snapshot at once
	}
	pause := 50 * time.Millisecond << min(w.fails-1, 10)
	if pause > w.c.cfg.backoff {
		pause = w.c.cfg.backoff
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-w.ctx.Done():
		return w.ended()
	case <-t.C:
		return nil
	}
}

// take delivers e if it is newer than what was delivered of its key.
func (w *Watch) take(e Entry) {
	if e.Revision > w.rev {
		w.rev = e.Revision
	}
	if w.snapshot {
		w.seen[e.Key] = struct{}{}
	}
	k, ok := w.known[e.Key]
	newer := !ok || e.newer(k)
	if !newer {
		return // a repeat (a resumed stream), or older than what was delivered
	}
	m := mark{version: e.Version, origin: e.Origin, deleted: e.Deleted}
	w.known[e.Key] = m
	switch {
	case !e.Deleted:
		w.queue = append(w.queue, WatchEvent{Type: EventPut, Entry: e})
	case ok && !k.deleted:
		w.queue = append(w.queue, WatchEvent{Type: EventDelete, Entry: e})
	}
	// A deletion of a key not delivered, or already deleted, changes nothing for the
	// caller; its version is kept, so an older write is never delivered after it.
}

// snapshotComplete ends a snapshot: the keys delivered before that it did not hold
// were deleted meanwhile.
func (w *Watch) snapshotComplete() {
	if !w.snapshot {
		return
	}
	w.snapshot = false
	w.needSnap = false
	for key, k := range w.known {
		if _, ok := w.seen[key]; ok || k.deleted {
			continue
		}
		k.deleted = true
		w.known[key] = k
		w.queue = append(w.queue, WatchEvent{Type: EventDelete, Inferred: true,
			Entry: Entry{Key: key, Version: k.version, Origin: k.origin, Deleted: true}})
	}
	w.seen = nil
	if !w.synced {
		w.synced = true
		w.queue = append(w.queue, WatchEvent{Type: EventSynced})
	}
}
