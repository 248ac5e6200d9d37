package fanout

import (
	"fmt"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
)

// One apply path. Every event another node wrote reaches the state table here, by
// one of two entries that share the per-event steps (checkEvent, then eventStore):
//
//   - live delivery: a peer's own writes as it replicates them (Replicate,
//     ReplicateBytes, a replicate stream: node.go). One verdict per event.
//   - repair or feed: entries a transport fetched or relayed (anti-entropy's Pull
//     answer and Push, a broker's feed: Apply). The batch is refused as a whole.
//
// The steps, for both: read the event's head within the limits (wire.EventHead,
// package event); bound its version (hlc.go); judge an event of this node's origin
// (origin.go); move the clock past the version, so that this node's next write of
// the key wins over it; Put it in the table (last writer wins); count the write for
// its sender (sourceWrites); answer OK, STALE (the table holds it or newer), BUSY
// (the table is full) or INVALID. What differs between the entries is applyKind.

// applyKind is what differs between the two entries of the apply path.
type applyKind uint8

const (
	// applyLive is a live delivery: an INVALID event refuses only itself (the
	// request's other events are applied); an event of this node's origin is only an
	// echo (STALE) or refused (INVALID) and never moves the clock; a version too far
	// ahead counts in versionsRefused.peer. The caller counts received events per
	// origin and the replication lag.
	applyLive applyKind = iota
	// applyRepair is a repair or a feed: the caller checks every entry first and
	// refuses the batch naming the first bad one; an entry of this node's origin can
	// be an earlier process's write (restored, counted in own.syncRestored); every
	// entry moves the clock, a refused one too; a version too far ahead counts in
	// versionsRefused.sync. The caller counts relayed entries.
	applyRepair
)

// eventFault is why checkEvent refused an event.
type eventFault uint8

const (
	eventFits       eventFault = iota
	eventUnreadable            // not an event within the limits
	eventAhead                 // version 0, or too far ahead of this node's clock
)

// checkEvent reads raw's head within the node's limits and checks its version against
// bound, counting a refused version for path k: the first step of applying an event,
// which Apply takes for the whole batch before it stores any.
func (n *Node) checkEvent(k applyKind, raw []byte, bound versionBound) (wire.EventHead, eventFault) {
	h, ok := n.cfg.Limits.ReadEvent(raw)
	if !ok {
		return h, eventUnreadable
	}
	if !bound.allows(h.Version) {
		if k == applyLive {
			n.versionsRefused.peer.Add(1)
		} else {
			n.versionsRefused.sync.Add(1)
		}
		return h, eventAhead
	}
	return h, eventFits
}

// storeBatchSize is how many writes an eventStore offers the state table at a time:
// state's PutBatch step, so that a peer's batch takes the table's lock once per step,
// not once per event.
const storeBatchSize = state.PutBatchStep

// eventStore applies, for one request, the events checkEvent passed, on path k: the
// own-origin rule, the clock, the Put, the sender's count, and the verdict. It gathers
// the writes and offers them to the table a batch at a time (state.Table.PutBatch,
// the same as one Put each in order), and writes each event's verdict into
// statuses at the event's index (by done at the latest). An event of this node's
// origin is judged against the table as the events before it left it: the writes
// gathered are put first.
type eventStore struct {
	n        *Node
	k        applyKind
	now      time.Time
	limit    uint64 // the clock's observe limit at now (observeLimit)
	src      *sourceCount
	statuses []fanoutv1.ItemStatus // one per event of the request

	ws       [storeBatchSize]state.Write
	at       [storeBatchSize]int // at[j] is the index of ws[j]'s event
	pending  int
	rs       [storeBatchSize]state.Result
	restored uint64 // own-origin writes taken (a repair's: an earlier process's)
	tally    sourceTally
}

// store applies event i, read into h from raw, written by origin and submitted at
// submitted (unix nanos, 0 if not given). Its verdict may wait for the next flush.
func (s *eventStore) store(i int, h *wire.EventHead, raw []byte, origin string, submitted int64) {
	n := s.n
	own := origin == n.cfg.NodeID
	if !own || s.k == applyRepair {
		n.clock.observeUnder(h.Version, s.limit) // before the Put: a later local write wins
	}
	if own {
		s.flush() // judged against the table as the events before it left it
		if st, take := n.ownEvent(s.k, h, submitted, s.now); !take {
			s.statuses[i] = st
			return
		}
	}
	if s.pending == storeBatchSize {
		s.flush()
	}
	s.ws[s.pending] = state.Write{Key: h.TaskID, KeyOffset: h.TaskOff, Raw: raw,
		Stamp: state.Stamp{Version: h.Version, Origin: origin}, Submitted: submitted, Deleted: h.Deleted}
	s.at[s.pending] = i
	s.pending++
}

// flush puts the writes gathered and hands out their verdicts.
func (s *eventStore) flush() {
	if s.pending == 0 {
		return
	}
	for j, r := range s.n.table.PutBatch(s.ws[:s.pending], s.now, s.rs[:0]) {
		s.tally.count(r)
		st := fanoutv1.ItemStatus_ITEM_STATUS_STALE
		switch r.Outcome {
		case state.Applied:
			if s.ws[j].Stamp.Origin == s.n.cfg.NodeID { // only a repair takes one: an earlier process's write
				s.restored++
			}
			st = fanoutv1.ItemStatus_ITEM_STATUS_OK
		case state.Full:
			st = fanoutv1.ItemStatus_ITEM_STATUS_BUSY
		}
		s.statuses[s.at[j]] = st
	}
	clear(s.ws[:s.pending]) // the writes alias the request's bytes
	s.pending = 0
}

// done flushes the writes gathered and adds the counts, once per request: the
// atomics are shared.
func (s *eventStore) done() {
	s.flush()
	s.src.add(&s.tally)
	if s.restored != 0 {
		s.n.own.syncRestored.Add(s.restored)
	}
}

// Apply stores entries a transport brought from the node from: the receive side of the
// seam (Transport), e.g. anti-entropy's (a Pull's answer, a peer's Push) or a broker's
// feed. It takes the apply path as a repair (applyRepair).
// It checks all of them first, as Replicate checks an event, and refuses the whole
// request naming the first bad one. Unlike Replicate it takes this node's own
// writes of an earlier process: a node restarted without --data-dir gets them back
// from its peers, and its clock moves past them; an entry of this node's origin that
// this process would hold, and does not, is skipped and counted (origin.go). An echo
// of this process's own write is skipped too, so a feed that brings back every
// event, this node's included, can hand them all here.
//
// Entries of an origin other than from (the peer that sent them) and this node are
// relayed: counted in fanout_sync_relayed_entries_total. Anti-entropy relays on
// purpose (docs/SECURITY.md, "Anti-entropy relays"): a restarted or new node gets the
// writes of nodes that are down or gone from the ones that hold them.
func (n *Node) Apply(from string, entries []*fanoutv1.SyncEntry) (int, error) {
	if n.draining.Load() {
		return 0, ErrDraining
	}
	now := n.cfg.Now()
	bound := newVersionBound(now, maxPeerAhead)
	heads := make([]wire.EventHead, len(entries))
	for i, e := range entries {
		h, f := n.checkEvent(applyRepair, e.GetEvent(), bound)
		switch o := e.GetOrigin(); {
		case f == eventUnreadable:
			return 0, invalid(fmt.Sprintf("entries[%d].event", i), "%s", n.unreadable())
		case f == eventAhead:
			return 0, invalid(fmt.Sprintf("entries[%d].event.version", i), "%s", bound.explain(h.Version, maxPeerAhead))
		case o == "" || len(o) > MaxNodeIDBytes:
			return 0, invalid(fmt.Sprintf("entries[%d].origin", i), "%d bytes, want 1..%d", len(o), MaxNodeIDBytes)
		}
		heads[i] = h
	}
	applied, relayed := 0, uint64(0)
	st := &eventStore{n: n, k: applyRepair, now: now, limit: observeLimit(now), src: n.sources.of(from),
		statuses: make([]fanoutv1.ItemStatus, len(entries))}
	for i, e := range entries {
		o := e.GetOrigin()
		if o != from && o != n.cfg.NodeID {
			relayed++
		}
		st.store(i, &heads[i], e.GetEvent(), o, e.GetSubmittedAtUnixNanos())
	}
	st.done()
	for _, s := range st.statuses {
		if s == fanoutv1.ItemStatus_ITEM_STATUS_OK {
			applied++
		}
	}
	n.relayed.Add(relayed)
	return applied, nil
}

// unreadable says what an event that ReadEvent refuses breaks: the rules it is held
// to, with this node's limits.
func (n *Node) unreadable() string {
	l := n.cfg.Limits
	return fmt.Sprintf("not an event within this node's limits: a valid fanout.v1.Event of at most %d bytes as encoded, "+
		"a task_id of 1..%d bytes, a payload of at most %d bytes (--max-event-bytes), at most %d attributes of %d bytes "+
		"in all, and a ttl that is a non-negative duration", l.EventBytes(), l.MaxTaskIDBytes, l.MaxEventBytes,
		l.MaxAttributes, l.MaxAttributeBytes)
}
