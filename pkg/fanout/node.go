package fanout

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/acks"
	"github.com/fanout/fanout/pkg/persist"
	"github.com/fanout/fanout/pkg/purgatory"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/timingwheel"
	"google.golang.org/protobuf/proto"
)

// Errors of the Node's domain API; the gRPC edge (pkg/grpcapi) maps them to status
// codes.
var (
	// ErrDraining: the node is shutting down and takes no new submissions.
	ErrDraining = errors.New("fanout: draining, not accepting submissions")
	// ErrClosed: the node has been closed.
	ErrClosed = errors.New("fanout: closed")
	// ErrShuttingDown: the node is shutting down and takes no peer traffic; the
	// sender keeps its events and sends them after the restart.
	ErrShuttingDown = errors.New("fanout: shutting down, not taking peer traffic; keep the events and retry")
	// ErrNotDurable wraps a failed commit to the data dir: the events are applied in
	// memory and queued for the peers, but not on this node's disk.
	ErrNotDurable = errors.New("fanout: not on disk")
)

// Node is one sidecar's domain core: it assigns versions, keeps the state table (the
// latest event of every task_id, own and replicated), fans accepted submissions out to
// one batcher per peer, and serves the table to readers (Get, Subscribe).
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock hlc
	table *state.Table

	subscribers streamCount   // open Subscribe streams (subscribe.go)
	delivered   atomic.Uint64 // entries sent on Subscribe streams

	// For /metrics (observe.go): submitted events by outcome, received ones by origin
	// and outcome, and how long ack-waiting Submits waited.
	submitted [subOutcomes]atomic.Uint64
	received  receivedStats
	ackWait   *ackWaits
	refused   refusals // peer calls authorize refused (auth.go)
	// relayed counts anti-entropy entries received from a peer other than their
	// origin (sync.go).
	relayed atomic.Uint64
	// versionsRefused counts versions refused as too far ahead (hlc.go), by path.
	versionsRefused struct{ app, peer, sync atomic.Uint64 }
	// own judges the entries peers send that claim this node's origin (origin.go);
	// sources counts the peers' writes that add keys, or are refused, per sender.
	own     ownOrigin
	sources sourceWrites

	// Ack-waiting Submits (ONE, QUORUM, ALL): a purgatory whose deadlines live on a timing
	// wheel driven by wheelDrv, and the ledger that resolves them from batcher fates
	// (package acks; acks.go maps the node's words onto it).
	wheel    *timingwheel.Wheel
	wheelDrv *timingwheel.Driver
	purg     *purgatory.Purgatory[ackKey]
	ledger   *acks.Ledger[string, uint64]

	// tr carries the accepted events to the other nodes (transport.go): the mesh,
	// or loneTransport without Config.NewTransport. Set by New, never changed.
	tr Transport
	// incarnation is drawn at random when the node starts, never 0: a peer that
	// answers with this node's id and another incarnation is another process.
	incarnation uint64

	// persist writes every change of the table to cfg.Store (--data-dir, package
	// persist); nil without one. It stops after every other writer, in Close.
	persist *persist.Persister

	// calls recycles the scratch of Submit calls (submit.go); out holds the bytes of
	// this node's own events on their way to the peers.
	calls sync.Pool
	out   outArena

	draining atomic.Bool
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the tombstone collector
	closed   sync.Once
}

// New builds a node, its transport (Config.NewTransport) and starts its goroutines:
// the tombstone collector and the timing wheel's driver (the transport starts its
// own). Close stops them.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	wheelAfter := cfg.After // nil (the default): the timing wheel ticks on a time.Ticker
	cfg.fillDefaults()
	// Revisions start at the start time in version units, so a revision handed out
	// before a restart is below the new table's first and is refused on resume.
	start := cfg.Now()
	cfg.State.FirstRevision = wallVersion(start)
	var pst *persist.Persister
	if cfg.Store != nil {
		pcfg := persist.DefaultConfig()
		pcfg.Store, pcfg.Logger = cfg.Store, cfg.Logger
		var err error
		if pst, err = persist.New(pcfg); err != nil {
			return nil, err
		}
		cfg.State.Collected = pst.Forgotten
	}
	table, err := state.New(cfg.State)
	if err != nil {
		return nil, err
	}
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger,
		clock:   hlc{now: cfg.Now},
		table:   table,
		persist: pst,
		ackWait: newAckWaits(),
		// rand.Uint64 is seeded per process; |1 keeps it off 0 ("not given").
		incarnation: rand.Uint64() | 1,
	}
	if pst != nil {
		n.clock.extend = cfg.Store.RaiseClock
		if err := n.load(); err != nil {
			return nil, err
		}
	}
	n.own.floor = newOwnFloor(start, n.clock.last.Load()) // after load raised the clock
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.startPurgatory(wheelAfter); err != nil {
		n.cancel()
		return nil, err
	}
	if n.tr, err = n.newTransport(); err != nil {
		n.wheelDrv.Stop()
		n.cancel()
		return nil, err
	}
	if e := entryBytes(cfg.Limits); e > defaultClientRecvBytes {
		n.log.Warn("an entry at --max-event-bytes is bigger than gRPC clients receive by default: a Subscribe message "+
			"or a Get page can be this big, so apps must raise their client's receive limit (e.g. grpc.MaxCallRecvMsgSize)",
			"max_event_bytes", cfg.Limits.MaxEventBytes, "message_bytes", e, "client_default_bytes", defaultClientRecvBytes)
	}
	if pst != nil {
		pst.Start() // everything loaded is on disk already
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.collectTombstones() }()
	return n, nil
}

// newTransport builds the node's transport: Config.NewTransport's, or a lone one.
func (n *Node) newTransport() (Transport, error) {
	if n.cfg.NewTransport == nil {
		return newLoneTransport(), nil
	}
	tr, err := n.cfg.NewTransport(n)
	if err != nil {
		return nil, err
	}
	if tr == nil {
		return nil, errors.New("fanout: Config.NewTransport returned no transport and no error")
	}
	return tr, nil
}

// load fills the empty table from the data dir (package persist) and moves the clock
// past everything the store ever committed, so that this node's next version is above
// its last one before the restart. Called by New, before any goroutine runs.
func (n *Node) load() error {
	start, now := time.Now(), n.cfg.Now()
	l, err := n.persist.Load(n.table, now)
	if err != nil {
		return err
	}
	n.clock.restore(l.Clock)
	st := n.table.Stats()
	n.log.Info("data dir loaded", "keys", l.Keys, "tombstones", st.Tombstones, "expired_tombstones", l.Expired,
		"clock_high_water_mark", l.Clock, "took", time.Since(start).Round(time.Millisecond).String())
	if l.Refused > 0 {
		n.log.Warn("data dir holds more than the state table's bounds; the rest was not loaded (anti-entropy does not bring it back either): raise --state-max-keys or --state-max-bytes",
			"refused", l.Refused, "keys", st.Keys, "state_max_keys", n.cfg.State.MaxKeys, "bytes", st.Bytes, "state_max_bytes", n.cfg.State.MaxBytes)
	}
	if limit := maxVersion(now, maxObservedSkew); l.Clock > limit {
		n.log.Warn("the data dir's clock is ahead of this host's clock: this node's versions continue from it, and peers refuse those more than 5m ahead of theirs; check the host clock",
			"clock_high_water_mark", l.Clock, "wall_version", wallVersion(now))
	}
	return nil
}

// collectTombstones removes the tombstones older than --tombstone-ttl, every quarter
// of it (within 100ms..1m): a deleted key is forgotten at most a quarter late.
func (n *Node) collectTombstones() {
	every := min(max(n.cfg.State.TombstoneTTL/4, 100*time.Millisecond), time.Minute)
	for {
		select {
		case <-n.cfg.After(every):
			n.table.Collect(n.cfg.Now())
		case <-n.ctx.Done():
			return
		}
	}
}

// startPurgatory builds the ack waits' timing wheel and its driver: on the real
// clock, or on after (Config.After when a test gives one) with Config.Now.
func (n *Node) startPurgatory(after func(time.Duration) <-chan time.Time) error {
	wcfg := timingwheel.DefaultConfig()
	wcfg.Start = n.cfg.Now()
	w, err := timingwheel.New(wcfg)
	if err != nil {
		return err
	}
	pcfg := purgatory.DefaultConfig()
	pcfg.Wheel = w
	purg, err := purgatory.New[ackKey](pcfg)
	if err != nil {
		return err
	}
	n.wheel, n.purg, n.ledger = w, purg, acks.NewLedger[string, uint64]()
	n.wheelDrv = timingwheel.StartDriver(w, wcfg.Tick, n.cfg.Now, after)
	return nil
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Replicate admits a batch from a peer: each valid event that is newer than the
// state table's entry is stored. Events that arrive here are never sent on. from is
// the peer that sent it, as its listener authenticated it (Config.AuthenticatePeers).
// The peer listener calls ReplicateBytes with the request's bytes; this form, for
// callers that hold a decoded request (tests, the in-memory FakeNetwork), encodes it
// and does the same.
func (n *Node) Replicate(ctx context.Context, from Caller, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, invalid("request", "%v", err)
	}
	return n.ReplicateBytes(ctx, from, b)
}

// ReplicateBytes admits the ReplicateRequest encoded in b, sent by from. It validates
// the request as a whole first (origin, sizes), then answers one status per event. b
// may be reused once it returns: the table copies what it keeps.
func (n *Node) ReplicateBytes(ctx context.Context, from Caller, b []byte) (*fanoutv1.ReplicateResponse, error) {
	if n.draining.Load() {
		return nil, ErrShuttingDown
	}
	var req wire.Replicate
	if err := wire.ParseReplicate(b, &req); err != nil {
		return nil, errNotProtobuf
	}
	return n.replicateParsed(ctx, from, &req)
}

// errNotProtobuf answers a request that is not a valid protobuf message. The README
// quotes it.
var errNotProtobuf = invalid("request", "not a valid protobuf message")

// replicateParsed is ReplicateBytes after the request is read (a ReplicateStream
// reads its batches itself): each event takes the apply path as a live delivery
// (apply.go), and is counted per origin with its lag.
func (n *Node) replicateParsed(_ context.Context, caller Caller, req *wire.Replicate) (*fanoutv1.ReplicateResponse, error) {
	if n.draining.Load() {
		return nil, ErrShuttingDown
	}
	if err := n.validateReplicate(req); err != nil {
		return nil, err
	}
	if err := n.authorize(caller, req.Origin); err != nil {
		return nil, err
	}
	if note := n.cfg.OnReplicate; note != nil {
		note(req.Origin)
	}
	resp := &fanoutv1.ReplicateResponse{NodeId: n.cfg.NodeID, Incarnation: n.incarnation, Statuses: make([]fanoutv1.ItemStatus, len(req.Events))}
	now := n.cfg.Now()
	bound := newVersionBound(now, maxPeerAhead)
	limit := observeLimit(now)
	from := n.received.of(req.Origin)
	var counts [recvOutcomes]uint64 // added once per request: the atomics are shared
	st := &eventStore{n: n, k: applyLive, now: now, limit: limit, src: n.sources.of(req.Origin), statuses: resp.Statuses}
	for i, raw := range req.Events {
		h, f := n.checkEvent(applyLive, raw, bound)
		if f != eventFits {
			resp.Statuses[i] = fanoutv1.ItemStatus_ITEM_STATUS_INVALID
			continue
		}
		var submitted int64
		if len(req.Submitted) > i {
			submitted = req.Submitted[i]
		}
		st.store(i, &h, raw, req.Origin, submitted)
	}
	st.done()
	for i, s := range resp.Statuses {
		counts[recvOutcome(s)]++
		if s != fanoutv1.ItemStatus_ITEM_STATUS_INVALID && len(req.Submitted) > i {
			from.observeLag(now, req.Submitted[i])
		}
	}
	from.add(&counts)
	return resp, nil
}

func (n *Node) validateReplicate(req *wire.Replicate) error {
	switch o := req.Origin; {
	case o == "":
		return invalid("origin_node", "empty")
	case len(o) > MaxNodeIDBytes:
		return invalid("origin_node", "%d bytes, at most %d", len(o), MaxNodeIDBytes)
	}
	if k := len(req.Events); k > n.cfg.Limits.MaxEvents {
		return invalid("events", "%d events, at most %d per request", k, n.cfg.Limits.MaxEvents)
	}
	if s, e := len(req.Submitted), len(req.Events); s != 0 && s != e {
		return invalid("submitted_at_unix_nanos", "%d entries for %d events", s, e)
	}
	return nil
}

// DrainReport is what Drain did with the events queued for the peers, in events
// (one per peer it was queued for).
type DrainReport struct {
	Peers int
	// Sent were delivered during the drain (taken, or answered stale: the peer had
	// newer).
	Sent uint64
	// Unsent were still queued when the drain ended (its deadline passed), or were
	// dropped during it (evicted, expired, refused as invalid).
	Unsent uint64
	// Durable: the node has a --data-dir, where every accepted event is; the Unsent
	// are kept there, and anti-entropy sends them after the restart. Without one
	// they are dropped.
	Durable bool
	// Keys in the state table when the drain ended.
	Keys int
}

// Drain stops accepting submissions and peer traffic (the senders keep their events
// for later), and waits until every peer's queues are empty, or ctx is done: the
// first step of a graceful shutdown.
func (n *Node) Drain(ctx context.Context) (DrainReport, error) {
	n.draining.Store(true)
	peers, sent, unsent, err := n.tr.Drain(ctx)
	return DrainReport{Peers: peers, Sent: sent, Unsent: unsent, Durable: n.persist != nil, Keys: n.table.Stats().Keys}, err
}

// Draining reports whether Drain has been called.
func (n *Node) Draining() bool { return n.draining.Load() }

// Close stops every goroutine of the node and waits for them. Tasks still queued are
// dropped (counted). Idempotent.
func (n *Node) Close() {
	n.closed.Do(func() {
		n.draining.Store(true)
		n.cancel()
		n.wg.Wait()
		n.wheelDrv.Stop()
		n.tr.Close() // its goroutines, then its queues: what is left ends with its fate
		if n.persist != nil {
			n.persist.Close() // the table's last changes go to disk
		}
	})
}

// Done is closed when the node is closed.
func (n *Node) Done() <-chan struct{} { return n.ctx.Done() }
