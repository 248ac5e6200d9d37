package fanout

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Catch-up (SPEC §14): the node bootstraps from its peers when it starts, then runs
// one anti-entropy round every AntiEntropyInterval (jittered), with the peers in
// turn. Rounds are pkg/antientropy's; this file schedules them, applies what they
// bring, keeps their statistics per peer and the node's readiness.

// SyncPeer is the anti-entropy side of a peer connection. A Replicator that is also a
// SyncPeer (*peers.Conn) takes part in bootstrap and anti-entropy; one that is not
// (*peers.FakeConn) only replicates.
type SyncPeer = antientropy.Peer

// roundTimeout bounds one anti-entropy round as a whole, past the deadline of each
// call in it (pkg/antientropy: a call on a silent peer ends within
// --replicate-timeout). Two minutes: a round pulls at most 64 MiB and pushes at most
// 4 MiB; one slower than that is retried next round.
const roundTimeout = 2 * time.Minute

// syncStats is one link's anti-entropy rounds, as this node called them.
type syncStats struct {
	mu                     sync.Mutex // guards everything below but gate and running; the metrics collector reads under it
	rounds, failed         uint64
	lastSuccess            time.Time
	lastDuration           time.Duration
	lastErr                string
	pulled, pushed         uint64
	digestBytes, bytes     uint64
	lastLeaves             int
	inSync, repaired, errs uint64 // rounds by result, for metrics
	// The bounds of a round (pkg/antientropy limits.go): rounds whose push was cut
	// or held back, calls past their deadline by call (syncCalls), and the state of
	// the WARN about a peer that asks for too much: at most one line per
	// peerErrorLogEvery, with the limited rounds since the last.
	pushCut, pushHeld uint64
	timeouts          map[string]uint64
	warnedAt          time.Time
	unwarned          int
	// gate is the peer's push allowance across rounds (its own lock).
	gate antientropy.Gate
	// running: a round with the peer is in flight; at most one is.
	running atomic.Bool
}

// syncCalls are the anti-entropy calls, as Result.TimedOut names them.
var syncCalls = []string{"digest", "pull", "push"}

// record counts a round, and reports whether to log a WARN about its limited push,
// with how many limited rounds the line covers.
func (s *syncStats) record(r antientropy.Result, err error, now time.Time) (warn bool, limited int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rounds++
	s.pulled += uint64(r.Pulled)
	s.pushed += uint64(r.Pushed)
	s.digestBytes += uint64(r.DigestBytes)
	s.bytes += uint64(r.Bytes)
	if r.TimedOut != "" {
		if s.timeouts == nil {
			s.timeouts = make(map[string]uint64, len(syncCalls))
		}
		s.timeouts[r.TimedOut]++
	}
	if r.PushCut {
		if r.PushHeld {
			s.pushHeld++
		} else {
			s.pushCut++
		}
		s.unwarned++
		if now.Sub(s.warnedAt) >= peerErrorLogEvery {
			warn, limited = true, s.unwarned
			s.warnedAt, s.unwarned = now, 0
		}
	}
	switch {
	case err != nil:
		s.failed++
		s.errs++
		s.lastErr = err.Error()
		return warn, limited
	case r.InSync:
		s.inSync++
	default:
		s.repaired++
	}
	s.lastErr, s.lastSuccess, s.lastDuration, s.lastLeaves = "", now, r.Duration, r.Leaves
	return warn, limited
}

func (s *syncStats) status() *fanoutv1.SyncStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &fanoutv1.SyncStatus{
		Rounds: s.rounds, Failed: s.failed, LastError: s.lastErr,
		Pulled: s.pulled, Pushed: s.pushed, DigestBytes: s.digestBytes, Bytes: s.bytes,
		LastLeaves: uint64(s.lastLeaves),
	}
	if !s.lastSuccess.IsZero() {
		st.LastSuccess = timestamppb.New(s.lastSuccess)
		st.LastDuration = durationpb.New(s.lastDuration)
	}
	return st
}

// readiness is the named health service's state: not ready until bootstrap ends.
type readiness struct {
	mu     sync.Mutex
	ready  bool   // guarded by mu
	reason string // guarded by mu
	done   chan struct{}
}

func (r *readiness) set(ready bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ready && !r.ready {
		close(r.done)
	}
	r.ready = r.ready || ready
	r.reason = reason
}

func (r *readiness) get() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.reason
}

// Ready is closed when the node's first sync with its peers has ended (or
// SyncTimeout passed): the named health service fanout.v1.FanoutService turns SERVING.
func (n *Node) Ready() <-chan struct{} { return n.readiness.done }

// Readiness reports whether the node is ready, and why (or why not) in words: not
// while it drains, nor while its data dir refuses commits, nor while Config.ReadyCheck
// fails, nor before its bootstrap ends.
func (n *Node) Readiness() (bool, string) {
	if n.draining.Load() {
		return false, "draining: shutting down"
	}
	if n.persist != nil {
		if ok, reason := n.persist.Fault(); !ok {
			return false, reason
		}
	}
	if check := n.cfg.ReadyCheck; check != nil {
		if err := check(); err != nil {
			return false, "not ready: " + err.Error()
		}
	}
	return n.readiness.get()
}

// ReadinessChanged is closed when Readiness may have changed after Ready: a data dir
// whose commits start or stop failing. Ask for it again after each close.
func (n *Node) ReadinessChanged() <-chan struct{} {
	if n.persist == nil {
		return nil
	}
	return n.persist.FaultChanged()
}

func (n *Node) newSyncer() (*antientropy.Syncer, error) {
	return antientropy.New(antientropy.Config{
		NodeID:       n.cfg.NodeID,
		Incarnation:  n.incarnation,
		Table:        n.table,
		Apply:        n.applySync,
		MaxKeyBytes:  n.cfg.Limits.MaxTaskIDBytes,
		MessageBytes: n.cfg.SyncMessageBytes,
		// A Digest, a Push or a Pull message takes no longer than a Replicate may: a
		// peer silent for longer is frozen or cut off, and its round fails.
		CallTimeout: n.cfg.ReplicateTimeout,
		Now:         n.cfg.Now,
	})
}

// syncLinks are the links that take part in anti-entropy.
func (n *Node) syncLinks() []*link {
	var out []*link
	for _, l := range *n.links.Load() {
		// Not with a process that has this node's id: its entries of "our" origin
		// would mix with ours.
		if _, ok := l.conn.(SyncPeer); ok && !l.isSelf.Load() && !l.selfConflict.Load() {
			out = append(out, l)
		}
	}
	return out
}

// antiEntropy bootstraps, then starts a round with the next peer every
// AntiEntropyInterval, ±25 % so that a cluster started at once does not sync in step,
// and one with each peer added to the set as it comes (even with the rounds off).
//
// Each round runs on a goroutine of its own, at most one per peer and
// maxRoundsInFlight in all, so that a peer that hangs a call (until its deadline,
// pkg/antientropy) holds up its own round, never the rounds with the others: the
// tick after it starts the next peer's on time. A peer whose last round is still in
// flight is skipped for the next in turn.
func (n *Node) antiEntropy() {
	if !n.awaitReadyCheck() {
		return
	}
	n.bootstrap()
	// With the rounds off, only new peers get one (tick stays nil).
	var tick <-chan time.Time
	timer := time.NewTimer(jittered(max(n.cfg.AntiEntropyInterval, time.Second)))
	defer timer.Stop()
	if n.cfg.AntiEntropyInterval > 0 {
		tick = timer.C
	}
	slots := make(chan struct{}, maxRoundsInFlight)
	for next := 0; ; next++ {
		select {
		case <-tick:
		case l := <-n.members.syncNew: // a peer just added: catch it (and us) up now
			if !l.removing.Load() && !l.isSelf.Load() && !n.draining.Load() {
				if _, ok := l.conn.(SyncPeer); ok {
					n.startRound(l, slots, "anti-entropy round with a new peer failed; the regular rounds retry")
				}
			}
			next--
			continue
		case <-n.ctx.Done():
			return
		}
		if links := n.syncLinks(); len(links) > 0 && !n.draining.Load() {
			for i := range links {
				if n.startRound(links[(next+i)%len(links)], slots, "anti-entropy round failed") {
					next += i
					break
				}
			}
		}
		timer.Reset(jittered(n.cfg.AntiEntropyInterval))
	}
}

// maxRoundsInFlight bounds the rounds that run at once (bootstrap's aside). Each
// holds a goroutine and one peer's call: 8 leaves room for rounds with live peers
// while several hung ones wait out their deadlines (5s, or a minute for a peer that
// trickles a Pull), where one round starts every interval (30s).
const maxRoundsInFlight = 8

// startRound starts a round with l on a goroutine of its own, unless one with l is
// in flight or slots are all taken; it reports whether it started one. A failed round
// is logged at WARN with failed.
func (n *Node) startRound(l *link, slots chan struct{}, failed string) bool {
	select {
	case slots <- struct{}{}:
	default:
		return false
	}
	if !l.sync.running.CompareAndSwap(false, true) {
		<-slots
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-slots }()
		defer l.sync.running.Store(false)
		if _, err := n.syncWith(l); err != nil {
			n.log.Warn(failed, "peer", l.addr, "err", err)
		}
	}()
	return true
}

func jittered(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// syncWith runs one round with l and records it.
func (n *Node) syncWith(l *link) (antientropy.Result, error) {
	ctx, cancel := context.WithTimeout(n.ctx, roundTimeout)
	defer cancel()
	r, err := n.syncer.Round(ctx, l.conn.(SyncPeer), &l.sync.gate)
	l.learn(r.PeerID, r.PeerIncarnation) // its node id for GetStatus; this node itself is dropped
	now := n.cfg.Now()
	if warn, limited := l.sync.record(r, err, now); warn {
		n.log.Warn("anti-entropy: the peer asks for more than a round pushes; it gets at most 10,000 entries or 4 MiB a round, "+
			"then nothing until a hold passes (1m, doubling to 16m while it keeps asking); its own rounds pull what it lacks",
			"peer", l.addr, "node_id", r.PeerID, "wanted_over", r.Wanted-1, "pushed", r.Pushed, "held", r.PushHeld,
			"held_until", l.sync.gate.ClosedUntil().UTC().Format(time.RFC3339), "limited_rounds_in_this_line", limited)
	}
	if err == nil && !r.InSync {
		n.log.Info("anti-entropy round repaired", "peer", l.addr, "leaves", r.Leaves,
			"pulled", r.Pulled, "pushed", r.Pushed, "bytes", r.Bytes, "duration", r.Duration.String())
	}
	return r, err
}

// readyCheckRetry is how often a starting node whose Config.ReadyCheck fails asks it
// again before its bootstrap: a second, the pace at which the peer TLS files are read
// again.
const readyCheckRetry = time.Second

// awaitReadyCheck holds the bootstrap back while Config.ReadyCheck fails: a node
// whose own certificate every peer refuses would find every peer unreachable, end its
// bootstrap at once and, once its certificate is renewed, be ready with a table it
// never synced. It returns false if the node closed first.
func (n *Node) awaitReadyCheck() bool {
	check := n.cfg.ReadyCheck
	if check == nil {
		return true
	}
	t := time.NewTicker(readyCheckRetry)
	defer t.Stop()
	for logged := false; ; {
		err := check()
		if err == nil {
			return true
		}
		if !logged {
			n.log.Warn("bootstrap waits until this node can be ready", "reason", err.Error())
			logged = true
		}
		select {
		case <-t.C:
		case <-n.ctx.Done():
			return false
		}
	}
}

// bootstrap runs a first round with every peer at once, and makes the node ready when
// all have ended (an unreachable peer ends at once) or SyncTimeout has passed. Rounds
// still running then go on in the background.
func (n *Node) bootstrap() {
	links := n.syncLinks()
	if len(links) == 0 {
		n.readiness.set(true, "ready: no peers to sync with")
		return
	}
	n.readiness.set(false, fmt.Sprintf("syncing with %d peers (bootstrap)", len(links)))
	start := n.cfg.Now()
	type outcome struct {
		l   *link
		r   antientropy.Result
		err error
	}
	done := make(chan outcome, len(links))
	for _, l := range links {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			r, err := n.bootstrapWith(l, start)
			done <- outcome{l, r, err}
		}()
	}
	var synced, unreachable, failed []string
	pulled, self := 0, 0
	timeout := time.NewTimer(n.cfg.SyncTimeout)
	defer timeout.Stop()
	for range links {
		select {
		case o := <-done:
			switch {
			case o.l.isSelf.Load(): // this node's own address in --peers
				self++
			case o.err == nil:
				synced = append(synced, o.l.addr)
				pulled += o.r.Pulled
			case errors.Is(o.err, peers.ErrNetwork):
				unreachable = append(unreachable, o.l.addr)
			default:
				failed = append(failed, fmt.Sprintf("%s: %v", o.l.addr, o.err))
			}
		case <-timeout.C:
			reason := fmt.Sprintf("ready: --sync-timeout %s passed; synced with %d of %d peers", n.cfg.SyncTimeout, len(synced), len(links))
			n.log.Warn("bootstrap incomplete", "synced", synced, "unreachable", unreachable, "failed", failed, "reason", reason)
			n.readiness.set(true, reason)
			return
		case <-n.ctx.Done():
			return
		}
	}
	reason := fmt.Sprintf("ready: synced with %d of %d peers", len(synced), len(links)-self)
	if len(unreachable) > 0 {
		reason += fmt.Sprintf("; unreachable: %s", strings.Join(unreachable, ", "))
	}
	if len(failed) > 0 {
		reason += fmt.Sprintf("; failed: %s", strings.Join(failed, "; "))
	}
	n.log.Info("bootstrap done", "pulled", pulled, "took", n.cfg.Now().Sub(start).String(), "reason", reason)
	n.readiness.set(true, reason)
}

// bootstrapReachWait is how long bootstrap keeps trying a peer it cannot reach. Two
// seconds: nodes that start together (a new cluster, a test, `sidecar bench`) are all
// listening by then, and syncing with them also leaves the connection up for the
// first Replicate, instead of in gRPC's reconnect backoff, where a call fails at once
// and the peer is paused for --network-failure-retry-delay. A peer that is really down
// costs a starting node those two seconds of readiness.
const bootstrapReachWait = 2 * time.Second

// bootstrapWith syncs with l, trying again while l is busy serving other rounds (up
// to SyncTimeout) or cannot be reached (up to bootstrapReachWait), and at once while
// a round ends at its bound on bytes pulled having pulled something. A peer that
// passes a call's deadline is not tried again: it is hanging, and would hold the
// node's readiness for SyncTimeout.
func (n *Node) bootstrapWith(l *link, start time.Time) (antientropy.Result, error) {
	l.sync.running.Store(true) // the regular rounds skip l until this ends
	defer l.sync.running.Store(false)
	var total antientropy.Result
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		r, err := n.syncWith(l)
		progress := r.Pulled > 0
		total.Pulled += r.Pulled
		r.Pulled = total.Pulled
		elapsed := n.cfg.Now().Sub(start)
		switch {
		case err == nil && r.PullCut && progress && elapsed < n.cfg.SyncTimeout:
			continue
		case errors.Is(err, antientropy.ErrTimeout):
			return r, err
		case errors.Is(err, peers.ErrCongestion) && elapsed+wait <= n.cfg.SyncTimeout:
		case errors.Is(err, peers.ErrNetwork) && elapsed+wait <= min(bootstrapReachWait, n.cfg.SyncTimeout):
		default:
			return r, err
		}
		select {
		case <-time.After(wait):
		case <-n.ctx.Done():
			return r, err
		}
	}
}

// applySync stores entries brought by anti-entropy (a Pull's answer, a peer's Push).
// It validates all of them first, as Replicate validates an event, and refuses the
// whole request naming the first bad one. Unlike Replicate it takes this node's own
// writes of an earlier process: a node restarted without --data-dir gets them back
// from its peers, and its clock moves past them; an entry of this node's origin that
// this process would hold, and does not, is skipped and counted (origin.go).
//
// Entries of an origin other than from (the peer that sent them) and this node are
// relayed: counted in fanout_sync_relayed_entries_total. Anti-entropy relays on
// purpose (docs/SECURITY.md, "Anti-entropy relays"): a restarted or new node gets the
// writes of nodes that are down or gone from the ones that hold them.
func (n *Node) applySync(from string, entries []*fanoutv1.SyncEntry) (int, error) {
	if n.draining.Load() {
		return 0, ErrDraining
	}
	now := n.cfg.Now()
	bound := newVersionBound(now, maxPeerAhead)
	heads := make([]wire.EventHead, len(entries))
	for i, e := range entries {
		h, ok := n.cfg.Limits.ReadEvent(e.GetEvent())
		switch o := e.GetOrigin(); {
		case !ok:
			return 0, invalid(fmt.Sprintf("entries[%d].event", i), "not an event within the limits (SPEC §10)")
		case !bound.allows(h.Version):
			n.versionsRefused.sync.Add(1)
			return 0, invalid(fmt.Sprintf("entries[%d].event.version", i), "%s", bound.explain(h.Version, maxPeerAhead))
		case o == "" || len(o) > MaxNodeIDBytes:
			return 0, invalid(fmt.Sprintf("entries[%d].origin", i), "%d bytes, want 1..%d", len(o), MaxNodeIDBytes)
		}
		heads[i] = h
	}
	applied, relayed := 0, uint64(0)
	src := n.sources.of(from)
	for i, e := range entries {
		h := heads[i]
		o := e.GetOrigin()
		if o != from && o != n.cfg.NodeID {
			relayed++
		}
		n.clock.observe(h.Version) // a refused entry too: this node's next write of the key wins over it
		if o == n.cfg.NodeID && !n.ownSynced(&h, e.GetSubmittedAtUnixNanos(), now) {
			continue
		}
		w := state.Write{Key: h.TaskID, KeyOffset: h.TaskOff, Raw: e.GetEvent(),
			Stamp: state.Stamp{Version: h.Version, Origin: o}, Submitted: e.GetSubmittedAtUnixNanos(), Deleted: h.Deleted}
		r := n.table.Put(&w, now)
		src.count(r)
		if r.Outcome == state.Applied {
			applied++
			if o == n.cfg.NodeID {
				n.own.syncRestored.Add(1)
			}
		}
	}
	n.relayed.Add(relayed)
	return applied, nil
}
