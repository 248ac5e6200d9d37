package fanout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/acks"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/event"
	"github.com/fanout/fanout/pkg/persist"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
)

// Submit reads a request from its bytes, as Replicate does: the app listener hands
// the node a SubmitRequest's bytes (SubmitBytes, ServeSubmitStream), readSubmit reads and
// validates them whole (event.Limits.ReadSubmit, which names the field of a refusal),
// without decoding the events, and prepare stores each event as the bytes the app
// sent with the version it gets appended (wire.AppendEventVersion). The answer is
// written from bytes too (wire.AppendSubmitResponse).

// submitCall is one Submit: the request as read, the scratch its events are prepared
// in, and the answer. Node.calls recycles them.
type submitCall struct {
	req      event.Submit // Events alias the request's bytes; AckTimeout 0: defaultAckTimeout
	bufs     [][]byte     // the events as stored (prepare)
	resp     wire.SubmitResponse
	revision uint64 // the highest revision the call's events got; 0 if none was accepted
}

// maxPooledEvents: a call of more events is not kept for reuse, so the pool never
// holds the slices of a 10,000-event request.
const maxPooledEvents = 1024

func (n *Node) getCall() *submitCall {
	if c, ok := n.calls.Get().(*submitCall); ok {
		return c
	}
	return new(submitCall)
}

func (n *Node) putCall(c *submitCall) {
	if cap(c.req.Events) > maxPooledEvents {
		return
	}
	// Nothing of the last request stays reachable from the pool.
	clear(c.req.Events)
	clear(c.req.Heads)
	clear(c.bufs)
	clear(c.resp.Results)
	*c = submitCall{req: event.Submit{Events: c.req.Events[:0], Heads: c.req.Heads[:0]}, bufs: c.bufs[:0],
		resp: wire.SubmitResponse{Versions: c.resp.Versions[:0], Results: c.resp.Results[:0]}}
	n.calls.Put(c)
}

// Submit validates a whole request, assigns versions, records them as this node's own
// writes, and queues every event for every peer. It returns once the events are in
// every peer's queue (ACK_POLICY_QUEUED). It is the form for callers that hold a
// decoded request (tests, tools): it encodes the request and does what the app
// listener does with its bytes.
func (n *Node) Submit(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	if i := slices.Index(req.GetEvents(), nil); i >= 0 {
		return nil, n.nullEvent(req, i)
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, invalid("request", "%v", err)
	}
	c := n.getCall()
	defer n.putCall(c)
	if err := n.readSubmit(b, c); err != nil {
		return nil, err
	}
	if err := n.submitChecked(ctx, c); err != nil {
		return nil, err
	}
	resp := new(fanoutv1.SubmitResponse)
	if err := proto.Unmarshal(wire.AppendSubmitResponse(nil, &c.resp), resp); err != nil {
		return nil, fmt.Errorf("decode the answer: %w", err)
	}
	return resp, nil
}

// SubmitBytes is Submit for a SubmitRequest's bytes, answered with the
// SubmitResponse's bytes, in a buffer of their own: what the app listener's Submit
// does (pkg/grpcapi). b may be reused once it returns.
func (n *Node) SubmitBytes(ctx context.Context, b []byte) ([]byte, error) {
	c := n.getCall()
	defer n.putCall(c)
	if err := n.readSubmit(b, c); err != nil {
		return nil, err
	}
	if err := n.submitChecked(ctx, c); err != nil {
		return nil, err
	}
	return c.answer(), nil
}

// answer is c's SubmitResponse, encoded in a buffer of its own.
func (c *submitCall) answer() []byte {
	return wire.AppendSubmitResponse(make([]byte, 0, wire.SubmitResponseSize(&c.resp)), &c.resp)
}

// readSubmit reads the SubmitRequest in b into c and validates it whole, refusing it
// while draining: the limits (event.Limits.ReadSubmit), the versions' bound, then
// what the transport can carry (Transport.Admit). c's events alias b.
func (n *Node) readSubmit(b []byte, c *submitCall) error {
	if n.draining.Load() {
		return ErrDraining
	}
	if err := n.cfg.Limits.ReadSubmit(b, &c.req); err != nil {
		return err
	}
	if err := n.checkVersions(c.req.Heads); err != nil {
		return err
	}
	return n.tr.Admit(c.req.Ack, c.req.Events)
}

// checkVersions refuses a version given by the app more than maxAppAhead ahead of the
// node's clock (0 asks the node for one), and counts it (versionsRefused.app).
func (n *Node) checkVersions(heads []wire.EventHead) error {
	bound := newVersionBound(n.cfg.Now(), maxAppAhead)
	for i := range heads {
		if v := heads[i].Version; v != 0 && !bound.allows(v) {
			n.versionsRefused.app.Add(1)
			return invalid(fmt.Sprintf("events[%d].version", i), "%s; use 0 to let the sidecar assign versions",
				bound.explain(v, maxAppAhead))
		}
	}
	return nil
}

// nullEvent is the error of a decoded request whose event i is nil: encoded, it would
// be an empty event. The request is read with the nil events as empty ones, so that
// what is wrong before event i (the request's fields, the events before it) is named
// first, as the reader orders its rules; event i's first fault is then its empty
// task_id, which is named as what it is.
func (n *Node) nullEvent(req *fanoutv1.SubmitRequest, i int) error {
	evs := make([]*fanoutv1.Event, len(req.Events))
	for j, ev := range req.Events {
		if evs[j] = ev; ev == nil {
			evs[j] = new(fanoutv1.Event)
		}
	}
	b, err := proto.Marshal(&fanoutv1.SubmitRequest{Events: evs, Ack: req.Ack, AckTimeout: req.AckTimeout, RequestId: req.RequestId})
	if err != nil {
		return invalid("request", "%v", err)
	}
	var s event.Submit
	err = n.cfg.Limits.ReadSubmit(b, &s)
	if inv, ok := err.(*InvalidError); !ok || inv.Field == fmt.Sprintf("events[%d].task_id", i) {
		return invalid(fmt.Sprintf("events[%d]", i), "null event")
	}
	return err
}

// waitsForAcks reports whether c will wait for peers (ack ONE, QUORUM or ALL with at
// least one peer).
func (n *Node) waitsForAcks(c *submitCall) bool {
	return needFor(c.req.Ack, n.tr.Destinations()) > 0
}

// submitChecked is Submit after readSubmit.
func (n *Node) submitChecked(ctx context.Context, c *submitCall) error {
	err := n.submitQueued(ctx, c)
	if err == nil {
		err = n.durable(ctx, c.revision) // at once for a request that waited for acks
	}
	return err
}

// submitQueued is submitChecked without the last wait for the disk: a request that
// waits for acks waits for the disk beside its peers; a QUEUED one returns once its
// events are queued, and the caller calls durable before it answers (SubmitStream
// applies the next requests meanwhile, so that they share a commit).
func (n *Node) submitQueued(ctx context.Context, c *submitCall) error {
	c.resp.RequestID = c.req.RequestID
	tasks, err := n.prepare(c)
	if err != nil {
		return err
	}
	if needFor(c.req.Ack, n.tr.Destinations()) > 0 && len(tasks) > 0 {
		return n.submitAndWait(ctx, c, tasks)
	}
	if err := n.tr.Publish(ctx, tasks, nil); err != nil {
		return err
	}
	c.resp.Satisfied = true
	return nil
}

// durable waits, with --data-dir, until the revisions up to rev are on this node's
// disk (ack QUEUED means on disk). Concurrent Submits share a commit. rev 0
// (nothing accepted: stale or refused events are not written) returns at once.
func (n *Node) durable(ctx context.Context, rev uint64) error {
	if n.persist == nil || rev == 0 {
		return nil
	}
	err := n.persist.Wait(ctx, rev)
	var failed *persist.CommitError
	switch {
	case errors.As(err, &failed):
		return fmt.Errorf("%w: %v", ErrNotDurable, failed.Cause)
	case errors.Is(err, persist.ErrStopped):
		return ErrClosed
	}
	return err
}

// submitAndWait publishes the events and waits, in the purgatory, until the policy's
// number of the transport's destinations have acknowledged all of them, or the wait
// can no longer succeed, or the deadline passes. The waiters are registered before
// the events are handed over (Publish's track), so no ack is missed.
func (n *Node) submitAndWait(ctx context.Context, c *submitCall, tasks []batcher.Task[wire.Outgoing]) error {
	var (
		op    *acks.Op
		keys  []ackKey
		start time.Time
	)
	track := func(dests, down []string) {
		op = acks.NewOp(dests, needFor(c.req.Ack, len(dests)), len(tasks))
		for i, why := range down {
			if why != "" {
				op.Fail(i, why)
			}
		}
		op.Init(op, n.ackDeadline(ctx, c.req.AckTimeout))
		keys = n.ledger.Register(op, len(tasks), func(i int) (string, uint64) { return tasks[i].ID, tasks[i].Value.Version })
		start = n.cfg.Now()
		n.purg.TryCompleteElseWatch(op, keys)
	}
	err := n.tr.Publish(ctx, tasks, track)
	if op == nil { // the transport failed before it tracked: nothing to wait for
		if err == nil {
			err = errors.New("fanout: the transport published without tracking the destinations")
		}
		return err
	}
	defer n.ledger.Unregister(op, keys)
	if err != nil {
		n.purg.Cancel(op)
		return err
	}
	if err := n.durable(ctx, c.revision); err != nil { // while the peers take them
		n.purg.Cancel(op)
		return err
	}
	select {
	case <-op.Done():
	case <-ctx.Done():
		n.purg.Cancel(op) // the caller is gone: forget the operation and its timer
		return ctx.Err()
	case <-n.ctx.Done():
		n.purg.Cancel(op)
		return ErrClosed
	}
	c.resp.PeerAcks, c.resp.Satisfied = ackResult(op)
	n.ackWait.observe(c.req.Ack, c.resp.Satisfied, n.cfg.Now().Sub(start))
	return nil
}

// defaultAckTimeout bounds an ack wait when the request sets none.
const defaultAckTimeout = 5 * time.Second

// maxAnswerMargin caps the time ackDeadline keeps for the answer to reach the caller
// (a tenth of the call's time left, at most this). On a loaded node the answer waits
// for a core, the race detector, the network: 50ms, the cap before, was missed on a
// 2-core machine at load average 18, and the caller got DEADLINE_EXCEEDED instead of
// its PeerAck list.
const maxAnswerMargin = 500 * time.Millisecond

// ackDeadline is now + ack_timeout (default 5s), capped by the call's own deadline less
// a margin, so that the caller still receives the PeerAck list rather than its own
// DEADLINE_EXCEEDED.
func (n *Node) ackDeadline(ctx context.Context, ackTimeout time.Duration) time.Time {
	now := n.cfg.Now()
	timeout := defaultAckTimeout
	if ackTimeout > 0 {
		timeout = ackTimeout
	}
	if d, ok := ctx.Deadline(); ok {
		left := d.Sub(now)
		timeout = min(timeout, left-min(left/10, maxAnswerMargin))
	}
	return now.Add(timeout)
}

// prepare assigns versions, stores each event in the state table as this node's write,
// and answers each in c.resp. The events the table accepted become tasks for every
// peer's batcher (shared, read-only); a stale or refused event is not sent.
func (n *Node) prepare(c *submitCall) ([]batcher.Task[wire.Outgoing], error) {
	now := n.cfg.Now()
	k := len(c.req.Events)
	next := n.clock.reserve(k)
	top := next + uint64(k) - 1
	for i := range c.req.Heads {
		top = max(top, c.req.Heads[i].Version)
	}
	if err := n.clock.cover(top); err != nil { // before any version can leave the node
		return nil, fmt.Errorf("%w: saving the clock: %v", ErrNotDurable, err)
	}
	// Each event, with its version, into a buffer of its own that is never written
	// again: the table copies it, and the peers are sent these bytes (wire.Outgoing).
	c.bufs = n.out.copyEvents(c.bufs[:0], c.req.Events, c.req.Heads, next)
	tasks := make([]batcher.Task[wire.Outgoing], 0, k)
	// An ack waits on the destinations' answers: the transport must not hold them back.
	// (A later event of the same key that no ack waits for may supersede one in a
	// peer's batcher; its answer, which acknowledges both, may then be held up to
	// --answer-hold.)
	awaited := needFor(c.req.Ack, n.tr.Destinations()) > 0
	c.resp.Versions = append(c.resp.Versions[:0], make([]uint64, k)...)
	c.resp.Results = append(c.resp.Results[:0], make([]wire.EventResult, k)...)
	var counts [subOutcomes]uint64 // added once per request: the atomics are shared
	defer func() {
		for i, c := range counts {
			if c > 0 {
				n.submitted[i].Add(c)
			}
		}
	}()
	for i, buf := range c.bufs {
		h := &c.req.Heads[i]
		v := h.Version
		if v == 0 {
			v = next + uint64(i)
		} else {
			n.clock.observe(v) // the app's own version: later ones of ours go above it
		}
		c.resp.Versions[i] = v
		key := buf[h.TaskOff : h.TaskOff+len(h.TaskID)]
		res := n.table.Put(&state.Write{
			Key: key, KeyOffset: h.TaskOff, Raw: buf,
			Stamp: state.Stamp{Version: v, Origin: n.cfg.NodeID}, Submitted: now.UnixNano(), Deleted: h.Deleted, Own: true,
		}, now)
		c.resp.Results[i] = n.eventResult(res)
		counts[submittedOutcome(res.Outcome)]++
		if res.Outcome == state.Applied {
			c.revision = max(c.revision, res.Revision)
			// The task_id aliases buf, which is never written again (and the string
			// keeps it alive): no copy of the key per task.
			id := unsafe.String(unsafe.SliceData(key), len(key))
			tasks = append(tasks, batcher.Task[wire.Outgoing]{ID: id, Value: wire.Outgoing{Raw: buf, Version: v, Awaited: awaited},
				Submitted: now, Expires: n.expiry(h, now)})
		}
	}
	return tasks, nil
}

// eventResult is a Put's outcome as the app sees it.
func (n *Node) eventResult(r state.Result) wire.EventResult {
	switch r.Outcome {
	case state.Applied:
		return wire.EventResult{Outcome: int32(fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED), Revision: r.Revision}
	case state.Stale:
		return wire.EventResult{Outcome: int32(fanoutv1.EventOutcome_EVENT_OUTCOME_STALE),
			CurrentVersion: r.Current.Version, CurrentOrigin: r.Current.Origin}
	default:
		return wire.EventResult{Outcome: int32(fanoutv1.EventOutcome_EVENT_OUTCOME_REFUSED), Detail: n.fullDetail()}
	}
}

// fullDetail says which bound the state table is at, and what to do.
func (n *Node) fullDetail() string {
	st := n.table.Stats()
	return fmt.Sprintf("state table full: %d of %d keys (--state-max-keys), %d of %d bytes (--state-max-bytes); "+
		"delete keys or raise the bound", st.Keys, n.cfg.State.MaxKeys, st.Bytes, n.cfg.State.MaxBytes)
}

// expiry is when the event of h expires unsent: its ttl, or the node's --task-ttl.
func (n *Node) expiry(h *wire.EventHead, now time.Time) time.Time {
	ttl := n.cfg.TaskTTL
	if t := event.TTL(h); t > 0 {
		ttl = t
	}
	if ttl == 0 {
		return time.Time{}
	}
	return now.Add(ttl)
}

// outArena holds the bytes of this node's own events on their way to the peers
// (wire.Outgoing.Raw). Small events are cut from shared chunks, so that one costs no
// allocation of its own; a chunk is garbage once no event in it is referenced. The
// price: a small event still pending for a peer keeps its whole chunk alive, so the
// bytes pending for the peers (counted by --max-buffer-bytes) can hold up to
// arenaChunk bytes per pending event more, at most --max-buffer × 4 KiB (40 MiB at
// the default) per peer, and only when the events around it in the chunk were sent.
type outArena struct {
	mu    sync.Mutex
	chunk []byte // guarded by mu: the unused rest of the current chunk
}

const (
	// arenaChunk is the size of a chunk: 4 KiB, about 30 events of 100 bytes each.
	arenaChunk = 4 << 10
	// arenaMax is the largest event cut from a chunk: a bigger one gets its own
	// buffer, and at most arenaMax of a chunk is left unused.
	arenaMax = 1 << 10
)

// copyEvents copies each event into a buffer of its own, appending the version
// next+i to event i when its head has none, and appends the buffers to dst. Each
// buffer's length is its capacity: an append to one can never reach another. The
// lock is held only to cut the small events' buffers from the chunk; the copying,
// and a big event's allocation, happen outside it.
func (a *outArena) copyEvents(dst, events [][]byte, heads []wire.EventHead, next uint64) [][]byte {
	first := len(dst)
	sizeOf := func(i int) int {
		if heads[i].Version == 0 {
			return len(events[i]) + wire.EventVersionSize(next+uint64(i))
		}
		return len(events[i])
	}
	a.mu.Lock()
	for i := range events {
		var buf []byte
		if size := sizeOf(i); size <= arenaMax {
			if size > cap(a.chunk) {
				a.chunk = make([]byte, arenaChunk)
			}
			buf, a.chunk = a.chunk[:0:size], a.chunk[size:]
		}
		dst = append(dst, buf) // nil for a big event: allocated below
	}
	a.mu.Unlock()
	for i, raw := range events {
		buf := dst[first+i]
		if buf == nil {
			buf = make([]byte, 0, sizeOf(i))
		}
		buf = append(buf, raw...)
		if heads[i].Version == 0 {
			buf = wire.AppendEventVersion(buf, next+uint64(i))
		}
		dst[first+i] = buf
	}
	return dst
}
