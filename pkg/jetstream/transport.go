package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/event"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/state"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Transport is fanout.Transport on a JetStream stream: Publish queues the node's
// accepted events in a bounded outbox, Config.Publishers goroutines put each into
// the stream with last-writer-wins and report its fate (the publish ack), and the
// feed applies everyone's events back through the node. It has one destination: the
// stream.
//
// Its goroutines: start (opens the stream, then starts the feed and the publishers,
// retrying with back-off while NATS is unreachable), the publishers, and the feed's.
// Close stops them all and waits.
type Transport struct {
	cfg  Config
	nc   *nats.Conn
	node *fanout.Node
	fate func(dest string, t *batcher.Task[wire.Outgoing], f batcher.Fate)
	dest string // the one destination: the stream's name
	// headers is the most bytes a message's headers take for this node (headerBound).
	headers int
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  sync.Once

	// ready is closed once the feed has applied the stream up to its last sequence
	// at start.
	ready chan struct{}
	// st and fd are set once, by start, when the stream is open and the feed runs;
	// nil before.
	st atomic.Pointer[stream]
	fd atomic.Pointer[feed]
	// reason is why the transport is not ready yet (start writes it).
	reason atomic.Pointer[string]

	ob outbox
	// hints are the feed's sequences per key, for the publishers (hints.go).
	hints hints

	// published counts the events that got a final fate from the stream (landed,
	// stored or stale), for Drain.
	published atomic.Uint64
	fates     [batcher.FateTooLarge + 1]atomic.Uint64 // by fate, for Peers
	latency   prometheus.Histogram                    // one put, from the first read to the ack
	lastErr   atomic.Pointer[string]                  // the last publish error, for Peers
	// publishErrs counts the puts that failed (and were retried), for the log's rate.
	publishErrs atomic.Uint64
	// markers are the delete markers the sidecar purges itself (a stream without
	// per-message TTLs; unused otherwise).
	markers markers
	// pos is the position loaded from Config.Checkpoint (posOK: there was one),
	// read by start once.
	pos   position
	posOK bool
	// savedSeq is the feed's sequence saved last; saves and saveErrs count the saves
	// that succeeded and failed; republished the events published again at start
	// (keepPosition, republish).
	savedSeq, saves, saveErrs, republished atomic.Uint64
	series                                 *series
}

var _ fanout.Transport = (*Transport)(nil)

// New starts a transport of node on the connection nc (the caller's: it dials, with
// its credentials and TLS, and closes it after Close). It returns at once; the
// stream is opened in the background, so a NATS that is unreachable at start makes a
// node that is not ready, and says why (Readiness), rather than one that fails.
func New(cfg Config, nc *nats.Conn, node *fanout.Node) (*Transport, error) {
	if err := cfg.validate(cfg.Limits); err != nil {
		return nil, err
	}
	if nc == nil || node == nil {
		return nil, errors.New("jetstream: New: a nil connection or node")
	}
	t := &Transport{cfg: cfg, nc: nc, node: node, fate: node.AckFates(), dest: cfg.stream(), ready: make(chan struct{}), series: newSeries(),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fanout_jetstream_publish_seconds",
			Help:    "Time to put one event into the stream: the read of its key, the publish and its ack, conflicts included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		})}
	t.headers = headerBound(node.ID())
	t.ob.init(cfg.OutboxBytes)
	t.setReason("connecting to NATS")
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.wg.Go(t.start)
	return t, nil
}

func (t *Transport) setReason(r string) { t.reason.Store(&r) }

// start opens the stream and starts the feed, retrying with back-off (100 ms to
// 10 s) until it succeeds or the transport closes; then it starts the publishers
// and waits for the feed to be ready.
func (t *Transport) start() {
	if t.cfg.Checkpoint != nil {
		t.pos, t.posOK = t.loadPosition()
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
		if t.nc.IsConnected() && !strings.HasPrefix(*t.reason.Load(), "jetstream:") {
			t.setReason("opening stream " + t.dest + " on " + t.nc.ConnectedUrlRedacted())
		}
		err := t.open()
		if err == nil {
			break
		}
		if !t.nc.IsConnected() {
			r := "NATS unreachable: " + err.Error()
			if le := t.nc.LastError(); le != nil { // why the last connect failed: refused, authorization, TLS
				r += " (last connect: " + le.Error() + ")"
			}
			t.setReason(r)
		} else {
			t.setReason(err.Error())
		}
		t.cfg.Logger.Warn("jetstream: not started; retrying", "err", err, "in", wait)
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	st := t.st.Load()
	if t.cfg.Checkpoint != nil {
		if n := t.republish(t.pos, t.posOK); n > 0 {
			t.republished.Add(uint64(n))
			t.cfg.Logger.Info("jetstream: publishing again this node's events that may not have reached the stream before the restart",
				"events", n, "accepted_since", t.pos.Unpublished)
		}
		info := st.s.CachedInfo()
		t.wg.Go(func() { t.keepPosition(info) })
	}
	if !st.msgTTL {
		t.wg.Go(func() { t.purger(st) })
	}
	for range t.cfg.Publishers {
		t.wg.Go(t.publisher)
	}
	if t.fd.Load().resumed {
		t.setReason("reading the stream from the saved position")
	} else {
		t.setReason("reading the stream's snapshot")
	}
	select {
	case <-t.ctx.Done():
	case <-t.fd.Load().ready:
		close(t.ready)
	}
}

// open opens the stream and starts the feed.
func (t *Transport) open() error {
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	st, err := openStream(ctx, t.nc, t.cfg, t.cfg.Limits)
	if err != nil {
		return err
	}
	info, err := st.s.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: info: %w", t.dest, err)
	}
	var mk *markers // the feed notes markers only for the sidecars' purge
	if !st.msgTTL {
		mk = &t.markers
	}
	fd, err := startFeed(ctx, st, t.node, t.node.ID(), &t.hints, mk, info, t.resumeFrom(t.pos, t.posOK, info), t.cfg.FeedCheck)
	if err != nil {
		return err
	}
	t.st.Store(st)
	t.fd.Store(fd)
	return nil
}

// Destinations is 1: the stream. Its publish ack answers ONE and QUORUM alike.
func (t *Transport) Destinations() int { return 1 }

// Admit refuses ack ALL (the stream's ack says nothing of the other nodes' receipt)
// and an event whose message would be over the server's max_payload.
func (t *Transport) Admit(ack fanoutv1.AckPolicy, events [][]byte) error {
	if ack == fanoutv1.AckPolicy_ACK_POLICY_ALL {
		return event.Invalid("ack", "ACK_POLICY_ALL is not available on the JetStream transport: the stream's publish ack "+
			"does not show the other nodes' receipt; use ACK_POLICY_QUORUM (committed by a majority of the stream's replicas)")
	}
	max := t.nc.MaxPayload()
	if max <= 0 {
		return nil // not connected yet: the publisher refuses it (FateTooLarge)
	}
	room := max - int64(t.headers) - 11 // the version the node may append
	for i, ev := range events {
		if int64(len(ev)) > room {
			return event.Invalid(fmt.Sprintf("events[%d]", i), "%d bytes: over what the NATS server's max_payload of %d bytes "+
				"leaves for an event (%d bytes, after the headers); this node takes events of up to %d bytes (--max-event-bytes %d): "+
				"send a smaller event, or raise max_payload on the NATS servers", len(ev), max, room, t.cfg.Limits.EventBytes(), t.cfg.Limits.MaxEventBytes)
		}
	}
	return nil
}

// headerBound is the most bytes a message's headers take for an origin: every
// number at its longest, a delete marker's operation and TTL, the expected stream
// and sequence.
func headerBound(origin string) int {
	m := &message{Stamp: state.Stamp{Version: math.MaxUint64, Origin: origin}, SubmittedAt: math.MinInt64, Deleted: true}
	h := encodeHeader(m)
	h.Set(jetstream.ExpectedStreamHeader, "KV_"+string(make([]byte, maxBucketBytes)))
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(math.MaxUint64, 10))
	h.Set(jetstream.MsgTTLHeader, time.Duration(math.MaxInt64).String())
	return (&nats.Msg{Header: h}).Size()
}

// Publish queues events in the outbox; the publishers put them into the stream and
// report each one's fate at the stream. track, if not nil, learns the one
// destination and, if NATS has been unreachable since the start, why it cannot
// acknowledge.
func (t *Transport) Publish(_ context.Context, events []batcher.Task[wire.Outgoing], track func(dests, down []string)) error {
	if track != nil {
		// Only a transport that never reached the stream says so at once; once it
		// has, a lost connection (a killed server, a leader's election) is waited
		// out up to the Submit's deadline while the publishers retry.
		var down []string
		if t.st.Load() == nil && !t.nc.IsConnected() {
			down = []string{"NATS unreachable (" + t.nc.Status().String() + ")"}
		}
		track([]string{t.dest}, down)
	}
	for i := range events {
		if f, ok := t.ob.push(&events[i]); !ok {
			t.finish(&events[i], f)
		}
	}
	return nil
}

// finish reports a task's fate at the stream and counts it.
func (t *Transport) finish(task *batcher.Task[wire.Outgoing], f batcher.Fate) {
	t.fates[f].Add(1)
	t.fate(t.dest, task, f)
}

// publisher puts the outbox's events into the stream, one at a time, until Close.
func (t *Transport) publisher() {
	st := t.st.Load()
	for {
		task, ok := t.ob.pop(t.ctx)
		if !ok {
			return
		}
		f := t.send(st, task)
		t.ob.done(task)
		t.finish(task, f)
	}
}

// send puts one task into the stream and says its fate, retrying with back-off
// (100 ms to 5 s) while the stream or NATS fails, until it expires or Close.
func (t *Transport) send(st *stream, task *batcher.Task[wire.Outgoing]) batcher.Fate {
	m, err := messageOf(t.node.ID(), task.Value.Raw, task.Value.Version, task.Submitted.UnixNano())
	if err != nil {
		t.cfg.Logger.Error("jetstream: an accepted event is not an event", "task_id", task.ID, "err", err)
		return batcher.FatePermanent
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		if !task.Expires.IsZero() && t.cfg.Now().After(task.Expires) {
			return batcher.FateExpired
		}
		start := t.cfg.Now()
		o, err := st.put(t.ctx, &m, t.hint(st, &m))
		if err == nil && o.verdict == gaveUp {
			// A hot key, or reads answered by a replica behind the leader (direct
			// gets may be served by any replica: one cut off from the others keeps
			// answering its last state). The event is retried as after a failure:
			// given up, it would stay on this node alone.
			err = fmt.Errorf("jetstream: %d publishes of %s met a conflict", t.cfg.MaxAttempts, task.ID)
		}
		switch {
		case err == nil:
			t.latency.Observe(t.cfg.Now().Sub(start).Seconds())
			return t.fateOf(o)
		case errors.Is(err, ErrTooLarge):
			t.cfg.Logger.Warn("jetstream: an event too large for the server", "task_id", task.ID, "err", err)
			return batcher.FateTooLarge
		case t.ctx.Err() != nil:
			return batcher.FateStopped
		}
		msg := err.Error()
		t.lastErr.Store(&msg)
		if rare(t.publishErrs.Add(1)) {
			t.cfg.Logger.Warn("jetstream: a publish failed; retrying", "task_id", task.ID, "err", err, "retry_in", wait,
				"failures", t.publishErrs.Load())
		}
		select {
		case <-t.ctx.Done():
			return batcher.FateStopped
		case <-time.After(wait):
		}
	}
}

// hint is what the first publish of m may expect without reading the key: the
// sequence of the key's last message the feed applied, if the node's table still
// holds m itself. Then that message was older than m: had it been newer the table
// would hold it instead (the table only moves to newer stamps), and if it was
// applied before m was accepted, m was accepted as newer than it. So expecting its
// sequence lands m only over an older message; if the stream moved on since, the
// publish meets a conflict and reads the key. Without a hint it guesses the key is
// new (expects no message): a new key lands in one round trip instead of two, and a
// key the stream holds meets a conflict and is read, as after any. nil: the table
// no longer holds m (a newer write of the key replaced it): read the key first.
func (t *Transport) hint(st *stream, m *message) *current {
	if e, ok := t.node.Table().Get([]byte(m.TaskID)); !ok || e.Stamp != m.Stamp {
		return nil
	}
	seq, ok := t.hints.get(st.prefix + encodeKey(m.TaskID))
	if !ok {
		return &current{}
	}
	return &current{present: true, seq: seq} // the zero stamp: older than m
}

// fateOf is the fate of a put's outcome: landed, stored or stale.
func (t *Transport) fateOf(o outcome) batcher.Fate {
	switch o.verdict {
	case publish, stored:
		t.published.Add(1)
		return batcher.FateSucceeded
	}
	t.published.Add(1) // stale: gaveUp is send's to retry
	return batcher.FateStale
}

// Ready is closed once the feed applied the stream up to its last sequence at start.
func (t *Transport) Ready() <-chan struct{} { return t.ready }

// Readiness says whether the transport is ready and why (or why not).
func (t *Transport) Readiness() (bool, string) {
	select {
	case <-t.ready:
	default:
		r := *t.reason.Load()
		if fd := t.fd.Load(); fd != nil {
			r = fmt.Sprintf("%s: %d messages to apply", r, fd.lag.Load())
		}
		return false, r
	}
	if !t.nc.IsConnected() {
		return true, "ready: caught up with stream " + t.dest + " at start; NATS unreachable now (" + t.nc.Status().String() + "), reconnecting"
	}
	return true, "ready: caught up with stream " + t.dest + " at start"
}

// Drain waits until the outbox is empty and nothing is in flight, or ctx ends.
func (t *Transport) Drain(ctx context.Context) (int, uint64, uint64, error) {
	before := t.published.Load()
	err := t.ob.waitEmpty(ctx)
	return 1, t.published.Load() - before, uint64(t.ob.len()), err
}

// Peers is the stream's row.
func (t *Transport) Peers() []*fanoutv1.PeerStatus {
	queued, bytes, inFlight := t.ob.stats()
	p := &fanoutv1.PeerStatus{
		Address:      t.dest,
		NodeId:       t.nc.ConnectedUrlRedacted(),
		Pending:      uint64(queued),
		PendingBytes: uint64(bytes),
		InFlight:     uint64(inFlight),
		Succeeded:    t.fates[batcher.FateSucceeded].Load(),
		Stale:        t.fates[batcher.FateStale].Load(),
		Overflow:     t.fates[batcher.FateOverflow].Load(),
		Expired:      t.fates[batcher.FateExpired].Load(),
		Permanent:    t.fates[batcher.FatePermanent].Load(),
		TooLarge:     t.fates[batcher.FateTooLarge].Load(),
	}
	if e := t.lastErr.Load(); e != nil {
		p.LastError = &fanoutv1.PeerError{Class: "publish", Message: *e}
	}
	return []*fanoutv1.PeerStatus{p}
}

// Status is the transport's kind, its stream, the server it is connected to and
// how far the feed and the outbox are (GetStatus transport).
func (t *Transport) Status() *fanoutv1.TransportStatus {
	queued, bytes, inFlight := t.ob.stats()
	s := &fanoutv1.TransportStatus{
		Kind:         "jetstream",
		Stream:       t.dest,
		Bucket:       t.cfg.Bucket,
		OutboxEvents: uint64(queued + inFlight),
		OutboxBytes:  uint64(bytes),
		Reconnects:   t.nc.Stats().Reconnects,
	}
	if t.nc.IsConnected() {
		s.Server, s.ServerVersion = t.nc.ConnectedUrlRedacted(), t.nc.ConnectedServerVersion()
	}
	if st := t.st.Load(); st != nil {
		s.Replicas = uint32(st.replicas)
	}
	if fd := t.fd.Load(); fd != nil {
		s.AppliedSequence, s.Lag = fd.applied.Load(), fd.lag.Load()
		s.LastSequence = s.AppliedSequence + s.Lag
	}
	return s
}

// Close stops the transport's goroutines and waits for them; the events still in
// the outbox end as FateStopped. Idempotent. It does not close the connection.
func (t *Transport) Close() {
	t.closed.Do(func() {
		t.cancel()
		t.wg.Wait()
		if fd := t.fd.Load(); fd != nil {
			fd.stop()
		}
		for _, task := range t.ob.drop() {
			t.finish(task, batcher.FateStopped)
		}
	})
}
