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
// the last message per key (the snapshot), then every new one. Each message is
// applied through the node's apply path (Apply), which resolves last-writer-wins and
// skips the echo of the node's own events. One goroutine (run) reads and applies;
// the counters are atomic for Collect and Readiness.
type feed struct {
	node applier
	log  *slog.Logger
	// hints gets the sequence of every message applied (or foreign) per key.
	hints *hints
	it    jetstream.MessagesContext
	wg    sync.WaitGroup
	// done is closed by stop: it ends run's back-off after a read error.
	done     chan struct{}
	stopOnce sync.Once

	// ready is closed once the feed applied up to the stream's last message as of
	// its start (at once for an empty stream).
	ready     chan struct{}
	readyOnce sync.Once
	// startSeq is the stream's last sequence when the feed started. Read-only.
	startSeq uint64

	// applied is the stream sequence of the last message handled (applied, or
	// skipped as foreign or refused). Written by run only.
	applied atomic.Uint64
	// lag is the messages of the stream after applied, as the server counted when it
	// delivered it (its NumPending).
	lag atomic.Uint64
	// handled has a value after run handled a message (capacity 1, sent without
	// blocking): for a reader that waits for the feed's progress.
	handled chan struct{}
	// foreign counts messages this transport does not read (decodeMessage refused
	// them: a `nats kv put`, a purge marker); refused those Apply refused.
	foreign, refused atomic.Uint64
}

// startFeed starts the feed of st's stream into node: an ordered consumer that
// delivers the last message per key first. It returns once the consumer exists;
// run applies in its own goroutine until stop.
func startFeed(ctx context.Context, st *stream, node applier, h *hints) (*feed, error) {
	info, err := st.s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: feed: stream info: %w", err)
	}
	cons, err := st.s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{st.prefix + ">"},
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		InactiveThreshold: feedInactive,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: feed: consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("jetstream: feed: %w", err)
	}
	f := &feed{node: node, log: st.cfg.Logger, hints: h, it: it, done: make(chan struct{}), handled: make(chan struct{}, 1), ready: make(chan struct{}), startSeq: info.State.LastSeq}
	if info.State.Msgs == 0 {
		f.markReady()
	}
	f.wg.Go(func() { f.run(st.prefix) })
	return f, nil
}

func (f *feed) markReady() { f.readyOnce.Do(func() { close(f.ready) }) }

// run reads and applies until stop. The ordered consumer resets itself (with
// back-off) on what it can recover from; an error it returns is logged and the read
// retried after a back-off of its own (100 ms to 5 s), so that a lasting one neither
// spins nor floods the log.
func (f *feed) run(prefix string) {
	wait := 100 * time.Millisecond
	for {
		msg, err := f.it.Next()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return
		case err != nil:
			f.log.Warn("jetstream: feed: reading the stream", "err", err, "retry_in", wait)
			select {
			case <-f.done:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = 100 * time.Millisecond
		f.handle(prefix, msg)
	}
}

// rare reports whether the n-th occurrence of something is logged: the first and
// then at each power of two, so a stream full of bad messages logs a few lines.
func rare(n uint64) bool { return n&(n-1) == 0 }

// handle applies one message and moves the feed's position past it.
func (f *feed) handle(prefix string, msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		f.log.Warn("jetstream: feed: a message without metadata", "subject", msg.Subject(), "err", err)
		return
	}
	m, err := decodeMessage(strings.TrimPrefix(msg.Subject(), prefix), msg.Headers(), msg.Data())
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
	}
	f.applied.Store(meta.Sequence.Stream)
	f.lag.Store(meta.NumPending)
	signal(f.handled)
	if meta.NumPending == 0 || meta.Sequence.Stream >= f.startSeq {
		f.markReady()
	}
}

// stop ends the feed and waits for run. Idempotent.
func (f *feed) stop() {
	f.stopOnce.Do(func() { close(f.done) })
	f.it.Stop()
	f.wg.Wait()
}
