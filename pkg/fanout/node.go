package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/breaker"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/purgatory"
	"github.com/fanout/fanout/pkg/timingwheel"
	"google.golang.org/protobuf/proto"
)

// Errors of the Node's domain API; the gRPC adapters map them to status codes.
var (
	// ErrDraining: the node is shutting down and takes no new submissions.
	ErrDraining = errors.New("fanout: draining, not accepting submissions")
	// ErrClosed: the node has been closed.
	ErrClosed = errors.New("fanout: closed")
)

// Node is one sidecar's domain core: it assigns versions, fans submissions out to one
// batcher per peer, and admits replicated events into the inbox.
type Node struct {
	cfg      Config
	log      *slog.Logger
	clock    hlc
	versions *versionTable
	inbox    *inbox

	// Ack-waiting Submits (SPEC §7): a purgatory whose deadlines live on a timing
	// wheel driven by wheelDrv, and the ledger that resolves them from batcher fates.
	wheel    *timingwheel.Wheel
	wheelDrv *timingwheel.Driver
	purg     *purgatory.Purgatory[ackKey]
	acks     *ackLedger

	// links is the current peer set, copy-on-write: Submit loads it without a lock.
	// Written only by New and the run goroutine (self-removal).
	links    atomic.Pointer[[]*link]
	removeCh chan *link // links found to be this node itself; buffered len(Peers)

	draining atomic.Bool
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the inbox pump and run
	closed   sync.Once
}

// New builds a node and starts its goroutines: one batcher per peer, the inbox pump and
// the peer-set janitor. Close stops them.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	cfg.Peers = append([]string(nil), cfg.Peers...)
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    hlc{now: cfg.Now},
		versions: newVersionTable(cfg.VersionMemory),
		inbox:    newInbox(cfg.InboxCapacity),
		removeCh: make(chan *link, len(cfg.Peers)),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if err := n.startPurgatory(); err != nil {
		n.cancel()
		return nil, err
	}
	links, err := n.startLinks(cfg.Peers)
	if err != nil {
		n.wheelDrv.Stop()
		n.cancel()
		return nil, err
	}
	n.links.Store(&links)
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.inbox.run(n.ctx) }()
	go func() { defer n.wg.Done(); n.run() }()
	return n, nil
}

func (n *Node) startPurgatory() error {
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
	n.wheel, n.purg, n.acks = w, purg, newAckLedger(purg)
	n.wheelDrv = timingwheel.StartDriver(w, wcfg.Tick, n.cfg.Now)
	return nil
}

func (n *Node) startLinks(addrs []string) ([]*link, error) {
	links := make([]*link, 0, len(addrs))
	for _, addr := range addrs {
		l, err := n.newLink(addr)
		if err != nil {
			for _, l := range links {
				l.close()
			}
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}

// run removes links that turned out to be this node (SPEC §8: a peer list, or DNS,
// may name our own address).
func (n *Node) run() {
	for {
		select {
		case l := <-n.removeCh:
			n.removeLink(l)
		case <-n.ctx.Done():
			return
		}
	}
}

func (n *Node) removeLink(dead *link) {
	old := *n.links.Load()
	next := make([]*link, 0, len(old))
	for _, l := range old {
		if l != dead {
			next = append(next, l)
		}
	}
	n.links.Store(&next)
	n.log.Info("peer address is this node; dropping it", "peer", dead.addr)
	dead.close()
}

// ID is this node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Submit validates a whole request, assigns versions, records them as this node's own
// writes, and queues every event for every peer. It returns once the events are in
// every peer's queue (ACK_POLICY_QUEUED).
func (n *Node) Submit(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	if err := n.precheck(req); err != nil {
		return nil, err
	}
	return n.submitChecked(ctx, req)
}

// precheck refuses a request while draining, and validates it whole.
func (n *Node) precheck(req *fanoutv1.SubmitRequest) error {
	if n.draining.Load() {
		return ErrDraining
	}
	return n.cfg.Limits.validateSubmit(req)
}

// WaitsForAcks reports whether Submit of req will wait for peers (ack ONE, QUORUM or
// ALL with at least one peer).
func (n *Node) WaitsForAcks(req *fanoutv1.SubmitRequest) bool {
	return needFor(req.GetAck(), len(*n.links.Load())) > 0
}

// submitChecked is Submit after precheck.
func (n *Node) submitChecked(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	tasks, versions := n.prepare(req.GetEvents())
	links := *n.links.Load()
	resp := &fanoutv1.SubmitResponse{RequestId: req.GetRequestId(), Versions: versions}
	if need := needFor(req.GetAck(), len(links)); need > 0 {
		return n.submitAndWait(ctx, req, links, tasks, resp, need)
	}
	if err := n.offer(ctx, links, tasks); err != nil {
		return nil, err
	}
	resp.Satisfied = true
	return resp, nil
}

func (n *Node) offer(ctx context.Context, links []*link, tasks []batcher.Task[*fanoutv1.Event]) error {
	for _, l := range links {
		if err := l.b.Offer(ctx, tasks); err != nil {
			return fmt.Errorf("queue for peer %s: %w", l.addr, err)
		}
	}
	return nil
}

// submitAndWait queues the events and waits, in the purgatory, until need peers have
// acknowledged all of them, or the wait can no longer succeed, or the deadline passes.
// The waiters are registered before the events are offered, so no ack is missed.
func (n *Node) submitAndWait(ctx context.Context, req *fanoutv1.SubmitRequest, links []*link,
	tasks []batcher.Task[*fanoutv1.Event], resp *fanoutv1.SubmitResponse, need int) (*fanoutv1.SubmitResponse, error) {
	peers := make([]string, len(links))
	for i, l := range links {
		peers[i] = l.addr
	}
	op := newAckOp(peers, need, len(tasks))
	for i, l := range links {
		if l.br.State() == breaker.Open {
			op.fail(i, "circuit breaker open")
		}
	}
	op.Init(op, n.ackDeadline(ctx, req))
	keys := n.acks.register(op, req.GetEvents())
	defer n.acks.unregister(op, keys)
	n.purg.TryCompleteElseWatch(op, keys)
	if err := n.offer(ctx, links, tasks); err != nil {
		n.purg.Cancel(op)
		return nil, err
	}
	select {
	case <-op.done:
	case <-ctx.Done():
		n.purg.Cancel(op) // the caller is gone: forget the operation and its timer
		return nil, ctx.Err()
	case <-n.ctx.Done():
		n.purg.Cancel(op)
		return nil, ErrClosed
	}
	resp.PeerAcks, resp.Satisfied = op.result()
	return resp, nil
}

// defaultAckTimeout bounds an ack wait when the request sets none (SPEC §7).
const defaultAckTimeout = 5 * time.Second

// ackDeadline is now + ack_timeout (default 5s), capped by the call's own deadline less
// a margin, so that the caller still receives the PeerAck list rather than its own
// DEADLINE_EXCEEDED.
func (n *Node) ackDeadline(ctx context.Context, req *fanoutv1.SubmitRequest) time.Time {
	now := n.cfg.Now()
	timeout := defaultAckTimeout
	if t := req.GetAckTimeout(); t != nil && t.AsDuration() > 0 {
		timeout = t.AsDuration()
	}
	if d, ok := ctx.Deadline(); ok {
		left := d.Sub(now)
		timeout = min(timeout, left-min(left/10, 50*time.Millisecond))
	}
	return now.Add(timeout)
}

// prepare assigns versions and expiry and records each event as this node's write.
// The events become shared, read-only, between the peers' batchers.
func (n *Node) prepare(events []*fanoutv1.Event) ([]batcher.Task[*fanoutv1.Event], []uint64) {
	now := n.cfg.Now()
	next := n.clock.reserve(len(events))
	tasks := make([]batcher.Task[*fanoutv1.Event], len(events))
	versions := make([]uint64, len(events))
	for i, ev := range events {
		if ev.Version == 0 {
			ev.Version = next + uint64(i)
		}
		versions[i] = ev.Version
		n.versions.record(ev.TaskId, stamp{version: ev.Version, origin: n.cfg.NodeID})
		tasks[i] = batcher.Task[*fanoutv1.Event]{ID: ev.TaskId, Value: ev, Submitted: now, Expires: n.expiry(ev, now)}
	}
	return tasks, versions
}

func (n *Node) expiry(ev *fanoutv1.Event, now time.Time) time.Time {
	ttl := n.cfg.TaskTTL
	if t := ev.GetTtl(); t != nil && t.AsDuration() > 0 {
		ttl = t.AsDuration()
	}
	if ttl == 0 {
		return time.Time{}
	}
	return now.Add(ttl)
}

// Replicate admits a batch from a peer: each valid event that is newer than the
// version table goes to the inbox. Events that arrive here are never sent on. The peer
// listener calls replicateFrame with the request's bytes; this form, for callers that
// hold a decoded request (tests, the in-memory FakeNetwork), encodes it and does the
// same.
func (n *Node) Replicate(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, invalid("request", "%v", err)
	}
	return n.replicateFrame(&peers.Frame{B: b})
}

// replicateFrame admits the ReplicateRequest encoded in f. It validates the request as
// a whole first (origin, sizes), then answers one status per event. f may be reused
// once it returns: admitted events are copied out.
func (n *Node) replicateFrame(f *peers.Frame) (*fanoutv1.ReplicateResponse, error) {
	var req rawReplicate
	if err := parseReplicate(f.B, &req); err != nil {
		return nil, invalid("request", "%v", err)
	}
	if err := n.validateReplicate(&req); err != nil {
		return nil, err
	}
	resp := &fanoutv1.ReplicateResponse{NodeId: n.cfg.NodeID, Statuses: make([]fanoutv1.ItemStatus, len(req.events))}
	for i, raw := range req.events {
		resp.Statuses[i] = n.admit(i, raw, req.origin, req.submitted)
	}
	return resp, nil
}

func (n *Node) validateReplicate(req *rawReplicate) error {
	switch o := req.origin; {
	case o == "":
		return invalid("origin_node", "empty")
	case len(o) > n.cfg.Limits.MaxTaskIDBytes:
		return invalid("origin_node", "%d bytes, at most %d", len(o), n.cfg.Limits.MaxTaskIDBytes)
	}
	if k := len(req.events); k > n.cfg.Limits.MaxEvents {
		return invalid("events", "%d events, at most %d per request", k, n.cfg.Limits.MaxEvents)
	}
	if s, e := len(req.submitted), len(req.events); s != 0 && s != e {
		return invalid("submitted_at_unix_nanos", "%d entries for %d events", s, e)
	}
	return nil
}

func (n *Node) admit(i int, raw []byte, origin string, submitted []int64) fanoutv1.ItemStatus {
	h, ok := n.cfg.Limits.readEvent(raw)
	if !ok || h.version == 0 {
		return fanoutv1.ItemStatus_ITEM_STATUS_INVALID
	}
	if origin == n.cfg.NodeID {
		return fanoutv1.ItemStatus_ITEM_STATUS_STALE // our own event came back: never echo
	}
	n.clock.observe(h.version)
	// The event's bytes are copied only for an event that wins (put), so a stale
	// duplicate costs no allocation; the copy's task_id is the string the table keeps.
	put := func() (string, bool) {
		d := delivery{version: h.version, origin: origin}
		d.raw, d.taskID = ownEvent(raw, h)
		if len(submitted) > i {
			d.submitted = submitted[i]
		}
		return d.taskID, n.inbox.put(d)
	}
	switch n.versions.admit(h.taskID, stamp{version: h.version, origin: origin}, put) {
	case admitted:
		return fanoutv1.ItemStatus_ITEM_STATUS_OK
	case busy:
		return fanoutv1.ItemStatus_ITEM_STATUS_BUSY
	default:
		return fanoutv1.ItemStatus_ITEM_STATUS_STALE
	}
}

// Drain stops accepting submissions and waits until every peer's queues are empty, or
// ctx is done (SPEC §9 graceful shutdown).
func (n *Node) Drain(ctx context.Context) error {
	n.draining.Store(true)
	var errs []error
	for _, l := range *n.links.Load() {
		if err := l.b.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", l.addr, err))
		}
	}
	return errors.Join(errs...)
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
		for _, l := range *n.links.Load() {
			l.close()
		}
	})
}

// Done is closed when the node is closed.
func (n *Node) Done() <-chan struct{} { return n.ctx.Done() }
