package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/nats-io/nats.go/jetstream"
)

// applier is the node's receive side of the seam: fanout.Node.Apply.
type applier interface {
	Apply(from string, entries []*fanoutv1.SyncEntry) (int, error)
}

// feedInactive is how long the server keeps the feed's consumer once no one reads
// it: a client that reconnects makes a new one (the ordered consumer's reset), and
// an old one the client could not delete is gone within this, so a reconnect storm
// leaves no consumers behind for long.
const feedInactive = 30 * time.Second

// feed brings every message of the stream to the node: one ordered consumer, from
// the last message per key (the snapshot) or from a saved sequence, then every new
// one. Each message is applied through the node's apply path (Apply), which resolves
// last-writer-wins and skips the echo of the node's own events.
//
// Its goroutines: run reads and applies (it alone makes consumers and moves the
// position); watch restarts a consumer that stopped delivering. stop ends both.
type feed struct {
	node applier
	st   *stream
	log  *slog.Logger
	self string // this node's id: the origin of its own delete markers
	// hints gets the sequence of every message applied (or foreign) per key.
	hints *hints
	// markers, if not nil, gets every delete marker (the periodic purge of a server
	// without per-message TTLs).
	markers *markers
	// check is how often watch looks for a stalled consumer (Config.FeedCheck).
	check time.Duration
	wg    sync.WaitGroup
	// done is closed by stop: it ends run's back-off and watch.
	done     chan struct{}
	stopOnce sync.Once
	// stopCtx is canceled by stop, with done: run's Next, restart's new consumer and
	// watch's request wait on it, so that stop
	// never waits on an iterator the client library replaced after stop stopped the
	// old one (an ordered consumer's reset racing Stop leaves a Next that nothing
	// ends: seen as a Shutdown that hung for good).
	stopCtx    context.Context
	cancelStop context.CancelFunc

	mu sync.Mutex
	// it is the current consumer's iterator: made by run, stopped by watch (to make
	// run start a new consumer) and by stop. Guarded by mu.
	it jetstream.MessagesContext
	// since: every message of the stream after applied was stored at or after it
	// (the stored time of applied's message, or when the feed found nothing after
	// it). Guarded by mu, written with applied.
	since time.Time

	// ready is closed once the feed applied up to the stream's last message as of
	// its start (at once if there is nothing to apply).
	ready     chan struct{}
	readyOnce sync.Once
	// startSeq is the stream's last sequence when the feed started; resumed says it
	// started from a saved sequence rather than the snapshot. Read-only.
	startSeq uint64
	resumed  bool

	// applied is the stream sequence of the last message handled (applied, or
	// skipped as foreign or refused), or the sequence before the first one to read.
	// Written by run only (under mu, with since).
	applied atomic.Uint64
	// lag is the messages of the stream after applied, as the server counted when it
	// delivered it (its NumPending).
	lag atomic.Uint64
	// handled has a value after run handled a message (capacity 1, sent without
	// blocking): for a reader that waits for the feed's progress. handledN counts
	// them, for watch.
	handled  chan struct{}
	handledN atomic.Uint64
	// foreign counts messages this transport does not read (decodeMessage refused
	// them: a `nats kv put`, a purge marker); refused those Apply refused; resets the
	// consumers watch found stalled and replaced.
	foreign, refused, resets atomic.Uint64
}

// feedStart is where a feed starts: from is the first sequence to read (0: the
// snapshot, the last message per key), since the time every message from it on was
// stored at or after (for the position; zero for a snapshot).
type feedStart struct {
	from  uint64
	since time.Time
}

// startFeed starts the feed of st's stream into node from where s says: an ordered
// consumer, checked every check for a stall. It returns once the consumer exists;
// run applies in its own goroutine until stop. info is the stream's, read now.
func startFeed(ctx context.Context, st *stream, node applier, self string, h *hints, mk *markers, info *jetstream.StreamInfo,
	s feedStart, check time.Duration) (*feed, error) {
	f := &feed{node: node, st: st, log: st.cfg.Logger, self: self, hints: h, markers: mk, check: check,
		done: make(chan struct{}), handled: make(chan struct{}, 1), ready: make(chan struct{}), startSeq: info.State.LastSeq}
	f.stopCtx, f.cancelStop = context.WithCancel(context.Background())
	if s.from > 0 {
		f.resumed = true
		f.applied.Store(s.from - 1)
		f.since = s.since
	}
	it, err := f.consume(ctx, s.from)
	if err != nil {
		return nil, err
	}
	f.it = it
	if info.State.Msgs == 0 || s.from > info.State.LastSeq {
		f.markReady()
	}
	f.wg.Go(f.run)
	f.wg.Go(f.watch)
	return f, nil
}

// consume makes an ordered consumer of the bucket's subjects from sequence from (0:
// the last message per key) and returns its iterator.
func (f *feed) consume(ctx context.Context, from uint64) (jetstream.MessagesContext, error) {
	cc := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{f.st.prefix + ">"},
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		InactiveThreshold: feedInactive,
	}
	if from > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := f.st.s.OrderedConsumer(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: feed: consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("jetstream: feed: %w", err)
	}
	return it, nil
}

func (f *feed) markReady() { f.readyOnce.Do(func() { close(f.ready) }) }

func (f *feed) stopped() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// pause waits d, or until stop (false).
func (f *feed) pause(d time.Duration) bool {
	select {
	case <-f.done:
		return false
	case <-time.After(d):
		return true
	}
}

// run reads and applies until stop. The ordered consumer resets itself (with
// back-off) on what it can recover from; an error it returns is logged and the read
// retried after a back-off of its own (100 ms to 5 s), so that a lasting one neither
// spins nor floods the log. An iterator stopped by watch is replaced by a consumer
// from the message after the last one handled.
func (f *feed) run() {
	wait := 100 * time.Millisecond
	for {
		f.mu.Lock()
		it := f.it
		f.mu.Unlock()
		msg, err := it.Next(jetstream.NextContext(f.stopCtx))
		switch {
		case err != nil && f.stopped():
			return
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			if f.stopped() || !f.restart() {
				return
			}
			continue
		case err != nil:
			f.log.Warn("jetstream: feed: reading the stream", "err", err, "retry_in", wait)
			if !f.pause(wait) {
				return
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = 100 * time.Millisecond
		f.handle(msg)
	}
}

// restart makes a new consumer from the message after the last one handled, retrying
// with back-off (100 ms to 5 s) until it succeeds (true) or stop (false).
func (f *feed) restart() bool {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		ctx, cancel := context.WithTimeout(f.stopCtx, 10*time.Second) // stop ends it at once
		it, err := f.consume(ctx, f.applied.Load()+1)
		cancel()
		if err == nil {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.stopped() { // stop ran meanwhile and stopped the old iterator only
				it.Stop()
				return false
			}
			f.it = it
			return true
		}
		if f.stopped() {
			return false
		}
		f.log.Warn("jetstream: feed: restarting the consumer", "from", f.applied.Load()+1, "err", err, "retry_in", wait)
		if !f.pause(wait) {
			return false
		}
	}
}

// watch restarts a consumer that has stopped delivering while the stream holds
// messages after the feed's position: every check, if nothing was handled since the
// last one, it asks the stream's leader for the first message after the position;
// if there is one at two checks in a row, it stops the iterator and run starts a new
// consumer from the position. (Seen after a partition of the consumer's server
// heals: the ordered consumer's heartbeats go on, its messages do not.)
func (f *feed) watch() {
	tick := time.NewTicker(f.check)
	defer tick.Stop()
	last, strikes := f.handledN.Load(), 0
	for {
		select {
		case <-f.done:
			return
		case <-tick.C:
		}
		if n := f.handledN.Load(); n != last {
			last, strikes = n, 0
			continue
		}
		ctx, cancel := context.WithTimeout(f.stopCtx, f.check)
		after := f.applied.Load()
		seq, found, err := f.st.nextAfter(ctx, after)
		cancel()
		if err != nil || !found {
			strikes = 0
			continue
		}
		if strikes++; strikes < 2 {
			continue
		}
		strikes = 0
		f.resets.Add(1)
		f.log.Warn("jetstream: feed: the consumer delivers nothing while the stream holds more; starting a new one",
			"applied", after, "next", seq, "resets", f.resets.Load())
		f.mu.Lock()
		f.it.Stop()
		f.mu.Unlock()
	}
}

// rare reports whether the n-th occurrence of something is logged: the first and
// then at each power of two, so a stream full of bad messages logs a few lines.
func rare(n uint64) bool { return n&(n-1) == 0 }

// handle applies one message and moves the feed's position past it.
func (f *feed) handle(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		f.log.Warn("jetstream: feed: a message without metadata", "subject", msg.Subject(), "err", err)
		return
	}
	if meta.Sequence.Stream <= f.applied.Load() {
		return // a restarted consumer's first messages may repeat what was handled
	}
	m, err := decodeMessage(strings.TrimPrefix(msg.Subject(), f.st.prefix), msg.Headers(), msg.Data())
	switch {
	case err != nil:
		f.hints.note(msg.Subject(), meta.Sequence.Stream) // any event replaces it
		if rare(f.foreign.Add(1)) {
			f.log.Warn("jetstream: feed: skipped a message this transport did not write", "subject", msg.Subject(),
				"seq", meta.Sequence.Stream, "err", err, "skipped", f.foreign.Load())
		}
	default:
		// from is the origin: the stream relays nothing, each message is its
		// origin's own write.
		entry := &fanoutv1.SyncEntry{Event: m.Raw, Origin: m.Stamp.Origin, SubmittedAtUnixNanos: m.SubmittedAt}
		_, err := f.node.Apply(m.Stamp.Origin, []*fanoutv1.SyncEntry{entry})
		switch {
		case err == nil:
			// The table now holds this message's stamp or a newer one.
			f.hints.note(msg.Subject(), meta.Sequence.Stream)
		case rare(f.refused.Add(1)):
			f.log.Warn("jetstream: feed: the node refused a message", "subject", msg.Subject(), "seq", meta.Sequence.Stream,
				"err", err, "refused", f.refused.Load())
		}
		if m.Deleted && f.markers != nil {
			f.markers.add(msg.Subject(), meta.Sequence.Stream, meta.Timestamp, m.Stamp.Origin == f.self)
		}
	}
	since := meta.Timestamp
	if meta.NumPending == 0 {
		since = time.Now() // nothing after it yet: what comes is stored from now on
	}
	f.mu.Lock()
	f.applied.Store(meta.Sequence.Stream)
	f.since = since
	f.mu.Unlock()
	f.lag.Store(meta.NumPending)
	f.handledN.Add(1)
	signal(f.handled)
	if meta.NumPending == 0 || meta.Sequence.Stream >= f.startSeq {
		f.markReady()
	}
}

// position is the feed's position: the last sequence handled and the time every
// message after it was stored at or after.
func (f *feed) position() (uint64, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied.Load(), f.since
}

// stop ends the feed and waits for its goroutines. Idempotent.
func (f *feed) stop() {
	f.stopOnce.Do(func() {
		close(f.done)
		f.cancelStop()
	})
	f.mu.Lock()
	f.it.Stop()
	f.mu.Unlock()
	f.wg.Wait()
}
