package mesh

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
	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Catch-up: the node bootstraps from its peers when it starts, then runs
// one anti-entropy round every AntiEntropyInterval (jittered), with the peers in
// turn. Rounds are pkg/antientropy's; this file schedules them, applies what they
// bring, keeps their statistics per peer and the node's readiness.

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
	reason string // guarded by mu: the bootstrap's
	// synced, unreachable, failed count the peers of the bootstrap by how its
	// round with each ended (failed includes the rounds --sync-timeout cut short).
	// Guarded by mu.
	synced, unreachable, failed int
	done                        chan struct{}
}

func (r *readiness) count(synced, unreachable, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced, r.unreachable, r.failed = synced, unreachable, failed
}

func (r *readiness) counts() (synced, unreachable, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced, r.unreachable, r.failed
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
func (m *Mesh) Ready() <-chan struct{} { return m.readiness.done }

// Readiness reports whether the mesh is ready, and why (or why not) in words: not
// while Config.ReadyCheck fails, nor before its bootstrap ends. (The node asks it
// after its own reasons: draining, a data dir that refuses commits.) Once ready, the
// reason is live: the peers up and down now, then what the bootstrap found at start.
func (m *Mesh) Readiness() (bool, string) {
	if check := m.cfg.ReadyCheck; check != nil {
		if err := check(); err != nil {
			return false, "not ready: " + err.Error()
		}
	}
	ready, reason := m.readiness.get()
	if !ready {
		return ready, reason
	}
	return true, m.liveReason(strings.TrimPrefix(reason, "ready: "))
}

// noPeers is the bootstrap's reason without peers.
const noPeers = "no peers to sync with"

// liveReason is a ready node's reason: its peers up and down now (since when), then
// atStart, the bootstrap's.
func (m *Mesh) liveReason(atStart string) string {
	links := m.syncLinks()
	switch {
	case len(links) == 0 && atStart == noPeers:
		return "ready: " + noPeers
	case len(links) == 0:
		return "ready: no peers now; at start: " + atStart
	}
	now := m.cfg.Now()
	var down []string
	for _, l := range links {
		if up, since := l.state.get(); !up {
			down = append(down, fmt.Sprintf("%s (for %s)", l.addr, now.Sub(since).Round(time.Second)))
		}
	}
	r := fmt.Sprintf("ready: %d of %d peers up", len(links)-len(down), len(links))
	if len(down) > 0 {
		r += "; down: " + strings.Join(down, ", ")
	}
	return r + "; at start: " + atStart
}

func (m *Mesh) newSyncer() (*antientropy.Syncer, error) {
	return antientropy.New(antientropy.Config{
		NodeID:       m.id,
		Incarnation:  m.inc,
		Table:        m.node.Table(),
		Apply:        m.node.Apply,
		MaxKeyBytes:  m.cfg.MaxTaskIDBytes,
		MessageBytes: m.cfg.SyncMessageBytes,
		// A Digest, a Push or a Pull message takes no longer than a Replicate may: a
		// peer silent for longer is frozen or cut off, and its round fails.
		CallTimeout: m.cfg.ReplicateTimeout,
		Now:         m.cfg.Now,
	})
}

// syncLinks are the links that take part in anti-entropy.
func (m *Mesh) syncLinks() []*link {
	var out []*link
	for _, l := range *m.links.Load() {
		// Not with a process that has this node's id: its entries of "our" origin
		// would mix with ours.
		if !l.isSelf.Load() && !l.selfConflict.Load() {
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
func (m *Mesh) antiEntropy() {
	if !m.awaitReadyCheck() {
		return
	}
	m.bootstrap()
	// With the rounds off, only new peers get one (tick stays nil).
	var tick <-chan time.Time
	if m.cfg.AntiEntropyInterval > 0 {
		tick = m.cfg.After(jittered(max(m.cfg.AntiEntropyInterval, time.Second)))
	}
	slots := make(chan struct{}, maxRoundsInFlight)
	for next := 0; ; next++ {
		select {
		case <-tick:
		case l := <-m.members.syncNew: // a peer just added: catch it (and us) up now
			if !l.removing.Load() && !l.isSelf.Load() && !m.node.Draining() {
				m.startRound(l, slots, "anti-entropy round with a new peer failed; the regular rounds retry")
			}
			next--
			continue
		case <-m.ctx.Done():
			return
		}
		if links := m.syncLinks(); len(links) > 0 && !m.node.Draining() {
			for i := range links {
				if m.startRound(links[(next+i)%len(links)], slots, "anti-entropy round failed") {
					next += i
					break
				}
			}
		}
		tick = m.cfg.After(jittered(m.cfg.AntiEntropyInterval))
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
func (m *Mesh) startRound(l *link, slots chan struct{}, failed string) bool {
	select {
	case slots <- struct{}{}:
	default:
		return false
	}
	if !l.sync.running.CompareAndSwap(false, true) {
		<-slots
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() { <-slots }()
		defer l.sync.running.Store(false)
		if _, err := m.syncWith(l); err != nil {
			m.log.Warn(failed, "peer", l.addr, "err", err)
		}
	}()
	return true
}

func jittered(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// syncWith runs one round with l and records it.
func (m *Mesh) syncWith(l *link) (antientropy.Result, error) {
	ctx, cancel := context.WithTimeout(m.ctx, roundTimeout)
	defer cancel()
	r, err := m.syncer.Round(ctx, l.conn, &l.sync.gate)
	l.learn(r.PeerID, r.PeerIncarnation) // its node id for GetStatus; this node itself is dropped
	switch {
	case err == nil:
		l.reached(true)
	case errors.Is(err, peers.ErrNetwork):
		l.reached(false)
	}
	now := m.cfg.Now()
	if warn, limited := l.sync.record(r, err, now); warn {
		m.log.Warn("anti-entropy: the peer asks for more than a round pushes; it gets at most 10,000 entries or 4 MiB a round, "+
			"then nothing until a hold passes (1m, doubling to 16m while it keeps asking); its own rounds pull what it lacks",
			"peer", l.addr, "node_id", r.PeerID, "wanted_over", r.Wanted-1, "pushed", r.Pushed, "held", r.PushHeld,
			"held_until", l.sync.gate.ClosedUntil().UTC().Format(time.RFC3339), "limited_rounds_in_this_line", limited)
	}
	if err == nil && !r.InSync {
		m.log.Info("anti-entropy round repaired", "peer", l.addr, "leaves", r.Leaves,
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
func (m *Mesh) awaitReadyCheck() bool {
	check := m.cfg.ReadyCheck
	if check == nil {
		return true
	}
	for logged := false; ; {
		err := check()
		if err == nil {
			return true
		}
		if !logged {
			m.log.Warn("bootstrap waits until this node can be ready", "reason", err.Error())
			logged = true
		}
		select {
		case <-m.cfg.After(readyCheckRetry):
		case <-m.ctx.Done():
			return false
		}
	}
}

// bootstrap runs a first round with every peer at once, and makes the node ready when
// all have ended (an unreachable peer ends at once) or SyncTimeout has passed. Rounds
// still running then go on in the background.
func (m *Mesh) bootstrap() {
	links := m.syncLinks()
	if len(links) == 0 {
		m.readiness.set(true, "ready: "+noPeers)
		return
	}
	m.readiness.set(false, fmt.Sprintf("syncing with %d peers (bootstrap)", len(links)))
	start := m.cfg.Now()
	type outcome struct {
		l   *link
		r   antientropy.Result
		err error
	}
	done := make(chan outcome, len(links))
	for _, l := range links {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			r, err := m.bootstrapWith(l, start)
			done <- outcome{l, r, err}
		}()
	}
	var synced, unreachable, failed []string
	pulled, self := 0, 0
	timeout := m.cfg.After(m.cfg.SyncTimeout)
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
		case <-timeout:
			reason := fmt.Sprintf("ready: --sync-timeout %s passed; synced with %d of %d peers", m.cfg.SyncTimeout, len(synced), len(links))
			m.readiness.count(len(synced), len(unreachable), len(links)-len(synced)-len(unreachable))
			m.log.Warn("bootstrap incomplete", "synced", synced, "unreachable", unreachable, "failed", failed, "reason", reason)
			m.readiness.set(true, reason)
			return
		case <-m.ctx.Done():
			return
		}
	}
	reason := fmt.Sprintf("ready: synced with %d of %d peers", len(synced), len(links)-self)
	if len(unreachable) > 0 {
		reason += fmt.Sprintf("; unreachable: %s (not waited for: anti-entropy syncs with them once they answer)", strings.Join(unreachable, ", "))
	}
	if len(failed) > 0 {
		reason += fmt.Sprintf("; failed: %s", strings.Join(failed, "; "))
	}
	m.readiness.count(len(synced), len(unreachable), len(failed))
	m.log.Info("bootstrap done", "pulled", pulled, "took", m.cfg.Now().Sub(start).String(), "reason", reason)
	m.readiness.set(true, reason)
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
func (m *Mesh) bootstrapWith(l *link, start time.Time) (antientropy.Result, error) {
	l.sync.running.Store(true) // the regular rounds skip l until this ends
	defer l.sync.running.Store(false)
	var total antientropy.Result
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		r, err := m.syncWith(l)
		progress := r.Pulled > 0
		total.Pulled += r.Pulled
		r.Pulled = total.Pulled
		elapsed := m.cfg.Now().Sub(start)
		switch {
		case err == nil && r.PullCut && progress && elapsed < m.cfg.SyncTimeout:
			continue
		case errors.Is(err, antientropy.ErrTimeout):
			return r, err
		case errors.Is(err, peers.ErrCongestion) && elapsed+wait <= m.cfg.SyncTimeout:
		case errors.Is(err, peers.ErrNetwork) && elapsed+wait <= min(bootstrapReachWait, m.cfg.SyncTimeout):
		default:
			return r, err
		}
		select {
		case <-m.cfg.After(wait):
		case <-m.ctx.Done():
			return r, err
		}
	}
}
