package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The peer set (issue 11): static --peers and DNS discovery together, changed
// while the node runs by SetPeers. A peer that appears gets a link at once (its
// batcher and connection) and an anti-entropy round as soon as the rounds' goroutine
// is free; a peer that disappears stops getting new events, and its pending ones are
// still sent for PeerRemovalGrace (a DNS answer that briefly leaves a pod out loses
// nothing), then dropped as "peer removed" (ack waiters settled DROPPED) and its
// series leave /metrics. A peer named again within the grace comes back as it was.
//
// Identity: a peer that answers with this node's id and incarnation is this node
// (its address is dropped for good); one that answers with this node's id and another
// incarnation is another process with the same --node-id: a conflict, logged at
// ERROR, shown in GetStatus and /metrics, and its events fail as permanent errors
// (never acked). Two peers answering with one id from two processes are a conflict
// too (shown on both).

// members is the mutable side of the peer set. The set itself is Node.links
// (copy-on-write, read without a lock by Submit); every change of it is made under mu.
type members struct {
	mu sync.Mutex
	// idMu serializes the links' node id changes and the conflict checks over them
	// (link.learn, checkIDs); never held with mu.
	idMu sync.Mutex
	// leaving holds the links out of the set, by address, still sending what they
	// had pending; each has a goroutine that closes it at the end of the grace.
	leaving map[string]*leavingLink
	// self are addresses found to be this node: SetPeers never adds them again.
	self map[string]bool
	// selfQ are links found to be this node, waiting for run to remove them (a link
	// learns it on its own worker goroutine, which cannot close its own batcher).
	selfQ []*link
	// closed: Close has begun; the set no longer changes.
	closed bool
	// closing counts the links out of leaving whose close has not returned yet;
	// guarded by mu. The last to close calls Config.ReturnMemory (startLeaving).
	closing int

	kick    chan struct{} // cap 1: selfQ has links for run
	syncNew chan *link    // links added while running: an anti-entropy round each, soon

	added, removed, returned atomic.Uint64 // peer set changes, for /metrics
	dropped                  atomic.Uint64 // events pending for removed peers at the end of their grace
	lastUnknown              atomic.Int64  // unix nanos of the last OnUnknownPeer call
}

type leavingLink struct {
	l      *link
	since  time.Time
	cancel context.CancelFunc // ends the grace early: the peer is back, or the node closes
}

// syncNewCap bounds the links queued for a first anti-entropy round; more wait for
// the regular rounds, which take every peer in turn.
const syncNewCap = 64

// unknownPeerEvery spaces OnUnknownPeer calls: a new node replicates many batches
// before DNS, refreshed at once, names it.
const unknownPeerEvery = time.Second

func (m *members) init() {
	m.leaving = make(map[string]*leavingLink)
	m.self = make(map[string]bool)
	m.kick = make(chan struct{}, 1)
	m.syncNew = make(chan *link, syncNewCap)
}

// SetPeers makes addrs (host:port of peer listeners, duplicates allowed) the node's
// peer set: links are made for new addresses and removed ones leave after the grace.
// Addresses found to be this node are left out. A link that cannot be made (an
// address the dialer refuses) is reported in the error; the rest of the set is applied.
func (m *Mesh) SetPeers(addrs []string) error {
	if m.cfg.Dial == nil {
		return errors.New("mesh: SetPeers needs Config.Dial")
	}
	ms := &m.members
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.closed {
		return ErrClosed
	}
	cur := *m.links.Load()
	gone := make(map[string]*link, len(cur))
	for _, l := range cur {
		gone[l.addr] = l
	}
	next := make([]*link, 0, len(addrs))
	var added []*link
	var errs []error
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		if seen[a] || ms.self[a] {
			continue
		}
		seen[a] = true
		if l, ok := gone[a]; ok {
			next = append(next, l)
			delete(gone, a)
			continue
		}
		if lv, ok := ms.leaving[a]; ok {
			lv.cancel()
			delete(ms.leaving, a)
			lv.l.removing.Store(false)
			next = append(next, lv.l)
			ms.returned.Add(1)
			m.log.Info("peer is back in the peer set; nothing was dropped", "peer", a, "node_id", lv.l.peerNodeID(),
				"after", m.cfg.Now().Sub(lv.since).String())
			continue
		}
		l, err := m.newLink(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		next = append(next, l)
		added = append(added, l)
	}
	m.links.Store(&next)
	for _, l := range gone {
		m.startLeaving(l)
	}
	if len(gone) > 0 {
		defer m.checkIDs() // a conflict may have left with a peer (idMu is taken under mu, never the other way)
	}
	for _, l := range added {
		ms.added.Add(1)
		m.log.Info("peer added", "peer", l.addr, "peers", len(next))
		select {
		case ms.syncNew <- l:
		default: // the regular rounds will reach it
		}
	}
	return errors.Join(errs...)
}

// startLeaving takes l out of the set: no new events; what it has pending is sent for
// PeerRemovalGrace, then dropped. Called under members.mu, with l already out of links.
func (m *Mesh) startLeaving(l *link) {
	ms := &m.members
	ctx, cancel := m.withTimeout(m.ctx, m.cfg.PeerRemovalGrace)
	lv := &leavingLink{l: l, since: m.cfg.Now(), cancel: cancel}
	ms.leaving[l.addr] = lv
	l.removing.Store(true)
	ms.removed.Add(1)
	st := l.b.Stats()
	m.log.Info("peer removed from the peer set; sending what it has pending for up to --peer-removal-grace",
		"peer", l.addr, "node_id", l.peerNodeID(), "pending", st.AcceptorQueue+st.ReprocessQueue+st.Pending+st.InFlight,
		"grace", m.cfg.PeerRemovalGrace.String())
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancel()
		err := l.b.Drain(ctx)
		if err != nil {
			err = context.Cause(ctx) // the grace's end: context.DeadlineExceeded
		}
		ms.mu.Lock()
		if ms.leaving[l.addr] != lv { // back in the set
			ms.mu.Unlock()
			return
		}
		delete(ms.leaving, l.addr)
		ms.closing++
		ms.mu.Unlock()
		l.close() // what is left ends FateStopped: DROPPED "peer removed" to ack waiters
		m.closedLeaving()
		dropped := l.stopped.Load()
		ms.dropped.Add(dropped)
		attrs := []any{"peer", l.addr, "node_id", l.peerNodeID(), "dropped", dropped, "after", m.cfg.Now().Sub(lv.since).String()}
		switch {
		case dropped == 0:
			m.log.Info("removed peer stopped: everything it had pending was sent", attrs...)
		case m.ctx.Err() != nil: // the node is closing: Close reports what it drops
		default:
			m.log.Warn("removed peer stopped with events unsent: they are dropped (the peer, if it comes back, "+
				"gets them by anti-entropy)", append(attrs, "err", fmt.Sprint(err))...)
		}
	}()
}

// closedLeaving is called after a leaving link has closed: once no other leaving
// link is still open or closing, the memory they held may go back to the OS
// (Config.ReturnMemory).
func (m *Mesh) closedLeaving() {
	ms := &m.members
	ms.mu.Lock()
	ms.closing--
	last := ms.closing == 0 && len(ms.leaving) == 0
	ms.mu.Unlock()
	if last && m.cfg.ReturnMemory != nil && m.ctx.Err() == nil {
		m.cfg.ReturnMemory()
	}
}

// run removes the links found to be this node.
func (m *Mesh) run() {
	for {
		select {
		case <-m.members.kick:
			m.removeSelf()
		case <-m.ctx.Done():
			return
		}
	}
}

// markSelf queues l for removal as this node's own address.
func (m *Mesh) markSelf(l *link) {
	ms := &m.members
	ms.mu.Lock()
	ms.selfQ = append(ms.selfQ, l)
	ms.mu.Unlock()
	select {
	case ms.kick <- struct{}{}:
	default:
	}
}

func (m *Mesh) removeSelf() {
	ms := &m.members
	ms.mu.Lock()
	q := ms.selfQ
	ms.selfQ = nil
	var dead []*link
	for _, l := range q {
		ms.self[l.addr] = true
		old := *m.links.Load()
		if i := slices.Index(old, l); i >= 0 {
			next := slices.Delete(slices.Clone(old), i, i+1)
			m.links.Store(&next)
			dead = append(dead, l)
		} else if lv, ok := ms.leaving[l.addr]; ok && lv.l == l {
			delete(ms.leaving, l.addr)
			lv.cancel()
			dead = append(dead, l)
		}
	}
	ms.mu.Unlock()
	for _, l := range dead {
		m.log.Info("peer address is this node; dropping it", "peer", l.addr)
		l.close()
	}
	m.checkIDs()
}

// allLinks is the set and the links still leaving it, for status and metrics.
func (m *Mesh) allLinks() []*link {
	links := *m.links.Load()
	ms := &m.members
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if len(ms.leaving) == 0 {
		return links
	}
	out := slices.Clone(links)
	for _, lv := range ms.leaving {
		out = append(out, lv.l)
	}
	slices.SortFunc(out[len(links):], func(a, b *link) int { return strings.Compare(a.addr, b.addr) })
	return out
}

// closeLeaving closes the links still leaving the set; Close calls it after the
// goroutines have stopped (each of them closes its own link first, so this is a
// safety net).
func (m *Mesh) closeLeaving() {
	ms := &m.members
	ms.mu.Lock()
	var ls []*link
	for a, lv := range ms.leaving {
		ls = append(ls, lv.l)
		delete(ms.leaving, a)
	}
	ms.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// NoteCaller tells Config.OnUnknownPeer about a peer that called this node and is not
// in its peer set (a node DNS names but the last refresh did not), at most once per
// unknownPeerEvery, so that the new node gets this node's events at once rather than
// after the next refresh.
func (m *Mesh) NoteCaller(id string) {
	if m.cfg.OnUnknownPeer == nil || id == m.id {
		return
	}
	for _, l := range *m.links.Load() {
		if l.peerNodeID() == id {
			return
		}
	}
	now := m.cfg.Now().UnixNano()
	ms := &m.members
	if last := ms.lastUnknown.Load(); now-last >= int64(unknownPeerEvery) && ms.lastUnknown.CompareAndSwap(last, now) {
		m.cfg.OnUnknownPeer(id)
	}
}

// withTimeout is context.WithTimeout on the mesh's clock (Config.After): ctx ends d
// from now (its cause context.DeadlineExceeded), when parent ends, or on cancel. A
// goroutine of the mesh waits for the first of them; d <= 0 ends ctx at once.
func (m *Mesh) withTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	if d <= 0 {
		cancel(context.DeadlineExceeded)
		return ctx, func() { cancel(context.Canceled) }
	}
	at := m.cfg.After(d)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		select {
		case <-at:
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}
