package mesh

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
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/promhist"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/breaker"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// link is the path to one peer: its batcher, and the connection the batcher's workers
// send through. The link is the batcher's Processor.
type link struct {
	addr   string
	m      *Mesh
	conn   Conn
	br     breaker.Breaker // counts network failures; its Hold is the batcher's Gate
	b      *batcher.Batcher[wire.Outgoing]
	nodeID atomic.Pointer[string] // learned from the first Replicate response
	isSelf atomic.Bool            // the peer answered with our own node id and incarnation
	// incarnation is the peer process's (0: not known yet, or an older peer).
	incarnation atomic.Uint64
	// conflict says why the peer's node id clashes (members.go); nil: it does not.
	// selfConflict: the clash is with this node's own id, so its events are dropped.
	conflict     atomic.Pointer[string]
	selfConflict atomic.Bool
	removing     atomic.Bool   // out of the peer set, sending what it has pending (members.go)
	stopped      atomic.Uint64 // events that ended FateStopped: pending when the link closed
	sync         syncStats     // anti-entropy rounds with this peer (sync.go)
	err          peerError     // the latest failed Replicate
	state        peerState     // whether the peer answers now
	// rtt is the duration of each Replicate call made (not those the breaker
	// refused), answered or failed, for /metrics.
	rtt  prometheus.Histogram
	once sync.Once
}

// peerError is a link's latest failed Replicate call, for GetStatus, and the state of
// its WARN log: a new message is logged at once, the same one again at most every
// peerErrorLogEvery.
type peerError struct {
	mu          sync.Mutex
	class, msg  string
	at          time.Time
	logged      string
	loggedAt    time.Time
	sinceLogged int // failures with the logged message since it was logged
	// recovered is when a call was first answered after the error at at; zero
	// while the error is the peer's current state.
	recovered time.Time
}

// answered notes that a call to the peer was answered: the last error, if any, is
// history from now on.
func (e *peerError) answered(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.at.IsZero() && e.recovered.IsZero() {
		e.recovered = now
	}
}

// peerState is whether a peer answers now, from the last call to it (a Replicate or
// an anti-entropy round): down after a call that could not reach it, up again after
// one it answered. A peer not called yet is up.
type peerState struct {
	mu      sync.Mutex
	down    bool      // guarded by mu
	changed time.Time // guarded by mu: when down last changed; zero: never
	// answered: a call was answered once; before that, the peer going down is
	// nothing to log (nodes that start together miss each other at first).
	answered bool
}

// set records a call's outcome (reached: the peer answered, even with an error) and
// reports whether the state changed, and whether that is worth a log line: the peer
// had answered before.
func (s *peerState) set(reached bool, now time.Time) (changed, log bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	log = s.answered
	s.answered = s.answered || reached
	if s.down != reached {
		return false, false
	}
	s.down, s.changed = !reached, now
	return true, log
}

func (s *peerState) get() (up bool, changed time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.down, s.changed
}

// peerErrorLogEvery spaces the WARN lines of a peer that keeps failing the same way:
// a dead peer fails every --network-failure-retry-delay.
const peerErrorLogEvery = 30 * time.Second

// record stores a failure and reports whether to log it, and how many of the same
// failed since the last line.
func (e *peerError) record(class, msg string, now time.Time) (log bool, repeats int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.class, e.msg, e.at, e.recovered = class, msg, now, time.Time{}
	if msg == e.logged && now.Sub(e.loggedAt) < peerErrorLogEvery {
		e.sinceLogged++
		return false, 0
	}
	repeats = e.sinceLogged
	e.logged, e.loggedAt, e.sinceLogged = msg, now, 0
	return true, repeats
}

func (e *peerError) status() *fanoutv1.PeerError {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at.IsZero() {
		return nil
	}
	pe := &fanoutv1.PeerError{Class: e.class, Message: e.msg, At: timestamppb.New(e.at)}
	if !e.recovered.IsZero() {
		pe.RecoveredAt = timestamppb.New(e.recovered)
	}
	return pe
}

// reached records whether a call reached the peer (an answer, even an error, or not:
// a network failure or an open breaker), and logs a change of its state.
func (l *link) reached(ok bool) {
	now := l.m.cfg.Now()
	if ok {
		l.err.answered(now)
	}
	if changed, log := l.state.set(ok, now); !changed || !log {
		return
	}
	if ok {
		l.m.log.Info("peer up again", "peer", l.addr, "node_id", l.peerNodeID())
	} else {
		l.m.log.Warn("peer down: a call could not reach it", "peer", l.addr, "node_id", l.peerNodeID())
	}
}

// failed records a failed Replicate, unless it is the breaker's own refusal (the
// cause that opened it stays the last error), and logs it (rate-limited).
func (l *link) failed(c batcher.Class, err error) {
	if errors.Is(err, breaker.ErrOpen) {
		l.reached(false)
		return
	}
	// A network failure did not reach the peer; a congested call (a deadline) says
	// nothing either way; anything else is its answer.
	switch c {
	case batcher.NetworkFailure:
		l.reached(false)
	case batcher.Congestion:
	default:
		l.reached(true)
	}
	class, hint := "permanent", ""
	switch c {
	case batcher.Congestion:
		class = "congestion"
	case batcher.NetworkFailure:
		class = "network"
	case batcher.TooLarge:
		class, hint = "too_large", "the peer's receive limit is below this request (its --max-batch-bytes and "+
			"--max-event-bytes, or this node's --max-event-bytes, differ): the batch is split and sent again; "+
			"an event refused alone is dropped and counted in too_large"
	}
	if log, repeats := l.err.record(class, err.Error(), l.m.cfg.Now()); log {
		attrs := []any{"peer", l.addr, "node_id", l.peerNodeID(), "class", class, "err", err.Error(), "same_since_last_line", repeats}
		if hint != "" {
			attrs = append(attrs, "what_happens", hint)
		}
		l.m.log.Warn("replicate to peer failed", attrs...)
	}
}

var _ batcher.Processor[wire.Outgoing] = (*link)(nil)

func (m *Mesh) newLink(addr string) (*link, error) {
	conn, err := m.cfg.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", addr, err)
	}
	l := &link{addr: addr, m: m, conn: conn, rtt: promhist.New(promhist.LatencyBuckets())}
	if l.br, err = m.newBreaker(addr); err != nil {
		conn.Close()
		return nil, err
	}
	bc := m.cfg.Batcher
	bc.Now = m.cfg.Now
	bc.Logger = m.log.With("peer", addr)
	final := m.final
	bc.OnFinal = func(t *batcher.Task[wire.Outgoing], f batcher.Fate) {
		if f == batcher.FateStopped {
			l.stopped.Add(1)
		}
		final(addr, t, f)
	}
	bc.Gate = l.br // while open, pending events wait (coalescing, bounded) instead of being sent
	// Coalescing keeps the highest version, never the latest arrival: every task of
	// this batcher has this node as its origin, so the version alone decides.
	bc.Newer = func(a, b *batcher.Task[wire.Outgoing]) bool { return a.Value.Version > b.Value.Version }
	bc.Size = outItemBytes // --max-batch-bytes and --max-buffer-bytes count the bytes sent
	bc.Budget = m.budget   // --max-pending-bytes: all peers together
	b, err := batcher.New(bc, l)
	if err != nil {
		conn.Close()
		return nil, err
	}
	l.b = b
	return l, nil
}

// newBreaker makes the breaker of one peer: network failures count against it,
// congestion is excluded, anything else (the peer answered) counts as a success.
func (m *Mesh) newBreaker(addr string) (breaker.Breaker, error) {
	bcfg := m.cfg.Breaker
	bcfg.Name = addr
	bcfg.IsFailure = func(err error) bool { return errors.Is(err, peers.ErrNetwork) }
	bcfg.IsExcluded = func(err error) bool { return errors.Is(err, peers.ErrCongestion) }
	bcfg.OnStateChange = func(name string, from, to breaker.State) {
		// Opening (the peer stopped answering) and a failed probe deserve a WARN; a
		// probe let through (half-open) and a recovery (closed) are good news: INFO.
		level := slog.LevelWarn
		if to != breaker.Open {
			level = slog.LevelInfo
		}
		m.log.Log(context.Background(), level, "peer circuit breaker changed state", "peer", name, "from", from.String(), "to", to.String())
	}
	br, err := m.cfg.NewBreaker(bcfg)
	if err != nil {
		return nil, fmt.Errorf("peer %s breaker: %w", addr, err)
	}
	return br, nil
}

// Process sends one batch as one Replicate call and maps the answer to the batcher's
// result classes. It runs on the batcher's worker goroutines.
func (l *link) Process(ctx context.Context, batch []batcher.Task[wire.Outgoing]) batcher.Result {
	if l.isSelf.Load() {
		return batcher.Result{Class: batcher.Permanent, Err: errors.New("peer is this node")}
	}
	// The request, from the events' own bytes (outEvent): no encoding here. The
	// frame's buffer is pooled; the codec sends a copy of it.
	event := func(i int) []byte { return batch[i].Value.Raw }
	submitted := func(i int) int64 { return batch[i].Submitted.UnixNano() }
	f := framePool.Get().(*frame.Frame)
	defer framePool.Put(f)
	f.B = wire.AppendReplicate(f.B[:0], l.m.id, len(batch), event, submitted)
	ctx, cancel := context.WithTimeout(ctx, l.m.cfg.ReplicateTimeout)
	defer cancel()
	// An answer no ack waits for may come later, with others (peers.Options.AnswerHold).
	mayHold := true
	for i := range batch {
		if batch[i].Value.Awaited {
			mayHold = false
			break
		}
	}
	var resp *fanoutv1.ReplicateResponse
	err := l.br.Do(func() error {
		start := time.Now()
		var err error
		var held bool
		resp, held, err = l.conn.ReplicateFrame(ctx, f, len(batch), mayHold)
		if !held { // a held answer's wait is not a round trip
			l.rtt.Observe(time.Since(start).Seconds())
		}
		return err
	})
	if err != nil {
		c := classOf(err)
		l.failed(c, err)
		return batcher.Result{Class: c, Err: err}
	}
	l.learn(resp.GetNodeId(), resp.GetIncarnation())
	l.reached(true)
	if l.selfConflict.Load() {
		err := fmt.Errorf("node id conflict: %s", *l.conflict.Load())
		l.failed(batcher.Permanent, err)
		return batcher.Result{Class: batcher.Permanent, Err: err}
	}
	items := make([]batcher.ItemOutcome, len(resp.Statuses))
	for i, s := range resp.Statuses {
		items[i] = itemOutcome(s)
	}
	return batcher.Result{Class: batcher.Success, Items: items}
}

// learn records the peer's node id and incarnation: a peer that is this node is
// scheduled for removal; a change re-checks the peers' ids for conflicts
// (members.go). It runs on every answer, so an answer that changes nothing returns
// at once.
func (l *link) learn(id string, inc uint64) {
	if id == "" {
		return
	}
	if cur := l.nodeID.Load(); cur != nil && *cur == id && (inc == 0 || inc == l.incarnation.Load()) {
		return
	}
	m := l.m
	learned := id // a copy for the pointer, so that id stays on the stack: every answer calls learn
	m.members.idMu.Lock()
	l.nodeID.Store(&learned)
	if inc != 0 {
		l.incarnation.Store(inc)
	}
	m.members.idMu.Unlock()
	// Incarnation 0: an older peer that does not send one; by id alone it is us.
	if id == m.id && (inc == 0 || inc == m.inc) {
		if !l.isSelf.Swap(true) {
			m.markSelf(l)
		}
		return
	}
	m.checkIDs()
}

// checkIDs re-checks every peer's id for a conflict: this node's own id from another
// process, or one id from two processes. It looks at all links at once, under idMu,
// so that two links learning at the same time cannot clear each other's conflict.
func (m *Mesh) checkIDs() {
	m.members.idMu.Lock()
	defer m.members.idMu.Unlock()
	links := *m.links.Load()
	for _, l := range links {
		id, inc := l.peerNodeID(), l.incarnation.Load()
		if id == m.id && inc != 0 && inc != m.inc {
			l.selfConflict.Store(true)
			l.setConflict(fmt.Sprintf("the peer answers with this node's own id %q from another process: two processes run with one --node-id "+
				"and cannot replicate to each other (events for it fail as permanent errors, never acked); give each its own id", id))
			continue
		}
		l.selfConflict.Store(false)
		var others []string
		for _, o := range links {
			if oi := o.incarnation.Load(); o != l && id != "" && inc != 0 && o.peerNodeID() == id && oi != 0 && oi != inc {
				others = append(others, o.addr)
			}
		}
		msg := ""
		if len(others) > 0 {
			msg = fmt.Sprintf("node id %q also answers from %s, another process: give each node its own --node-id", id, strings.Join(others, ", "))
		}
		l.setConflict(msg)
	}
}

// setConflict records the link's id conflict ("" clears it), logging each change.
func (l *link) setConflict(msg string) {
	old := l.conflict.Load()
	switch {
	case msg == "" && old == nil:
		return
	case msg == "":
		l.conflict.Store(nil)
		l.m.log.Info("node id conflict resolved", "peer", l.addr, "node_id", l.peerNodeID())
		return
	case old != nil && *old == msg:
		return
	}
	l.conflict.Store(&msg)
	l.m.log.Error("node id conflict", "peer", l.addr, "node_id", l.peerNodeID(), "conflict", msg)
}

func (l *link) conflictText() string {
	if p := l.conflict.Load(); p != nil {
		return *p
	}
	return ""
}

func (l *link) peerNodeID() string {
	if p := l.nodeID.Load(); p != nil {
		return *p
	}
	return ""
}

func (l *link) close() {
	l.once.Do(func() {
		l.b.Close()
		l.conn.Close()
	})
}

func classOf(err error) batcher.Class {
	switch {
	case errors.Is(err, peers.ErrTooLarge):
		return batcher.TooLarge
	case errors.Is(err, peers.ErrCongestion):
		return batcher.Congestion
	case errors.Is(err, peers.ErrNetwork), errors.Is(err, breaker.ErrOpen):
		return batcher.NetworkFailure
	default:
		return batcher.Permanent
	}
}

func itemOutcome(s fanoutv1.ItemStatus) batcher.ItemOutcome {
	switch s {
	case fanoutv1.ItemStatus_ITEM_STATUS_OK:
		return batcher.ItemOK
	case fanoutv1.ItemStatus_ITEM_STATUS_STALE:
		return batcher.ItemStale
	case fanoutv1.ItemStatus_ITEM_STATUS_BUSY:
		return batcher.ItemBusy
	default:
		return batcher.ItemInvalid
	}
}
