package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/breaker"
	"github.com/fanout/fanout/pkg/state"
)

// ErrClosed: the mesh has been closed; its peer set no longer changes.
var ErrClosed = errors.New("mesh: closed")

// Node is what the mesh needs of the node it carries events for (*fanout.Node): its
// side of the transport seam (fanout.Transport says who calls what).
type Node interface {
	// ID is the node's id, Incarnation its process's random id (never 0).
	ID() string
	Incarnation() uint64
	// Table is the node's state table, read by anti-entropy (digests, scans).
	Table() *state.Table
	// Apply stores entries brought by anti-entropy from the peer from.
	Apply(from string, entries []*fanoutv1.SyncEntry) (int, error)
	// AckFates is where every event's fate at every peer is reported.
	AckFates() func(dest string, t *batcher.Task[wire.Outgoing], fate batcher.Fate)
	// Draining reports whether the node is shutting down.
	Draining() bool
}

// Mesh is the full-mesh transport: one link per peer (a batcher, a circuit breaker and
// a connection), the peer set and its changes, the pending budget over all peers, and
// anti-entropy (the bootstrap at start, then a round with one peer in turn). It
// implements fanout.Transport; doc.go tells its story.
type Mesh struct {
	cfg  Config
	log  *slog.Logger
	node Node
	id   string // node.ID(), read on every answer
	inc  uint64 // node.Incarnation()
	// final is node.AckFates(): called by every batcher's OnFinal, per event per
	// peer, as a plain func (no interface call on that path).
	final func(dest string, t *batcher.Task[wire.Outgoing], fate batcher.Fate)

	// links is the current peer set, copy-on-write: Publish loads it without a lock.
	// Written by New, then only under members.mu (SetPeers, self-removal; members.go).
	links   atomic.Pointer[[]*link]
	members members
	// budget bounds the events pending for every peer together (budget.go).
	budget *batcher.Budget

	// syncer runs anti-entropy rounds and answers the peers' (sync.go); readiness
	// is the bootstrap's outcome.
	syncer    *antientropy.Syncer
	readiness readiness

	d descs // the series on /metrics (metrics.go)

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // run, anti-entropy, its rounds and bootstrap rounds, the leaving links' graces
	closed sync.Once
}

// New builds the mesh of node and starts its goroutines: one batcher per peer, the
// self-link janitor and anti-entropy (which bootstraps first). Close stops them.
// fanout.Config.NewTransport calls it (the node is built, not yet running).
func New(cfg Config, node Node) (*Mesh, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	cfg.Peers = append([]string(nil), cfg.Peers...)
	m := &Mesh{cfg: cfg, log: cfg.Logger, node: node, id: node.ID(), inc: node.Incarnation(), final: node.AckFates(), d: newDescs()}
	m.members.init()
	var err error
	if m.budget, err = batcher.NewBudget(cfg.MaxPendingBytes); err != nil {
		return nil, err
	}
	m.readiness.done = make(chan struct{})
	if m.syncer, err = m.newSyncer(); err != nil {
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	links, err := m.startLinks(cfg.Peers)
	if err != nil {
		m.cancel()
		return nil, err
	}
	m.links.Store(&links)
	m.wg.Add(2)
	go func() { defer m.wg.Done(); m.run() }()
	go func() { defer m.wg.Done(); m.antiEntropy() }()
	return m, nil
}

func (m *Mesh) startLinks(addrs []string) ([]*link, error) {
	links := make([]*link, 0, len(addrs))
	for _, addr := range addrs {
		l, err := m.newLink(addr)
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

// Destinations is the number of peers in the set now.
func (m *Mesh) Destinations() int { return len(*m.links.Load()) }

// Admit admits every Submit: the mesh sees each peer's receipt (ALL), and an event
// within the node's limits fits a peer's message.
func (m *Mesh) Admit(fanoutv1.AckPolicy, [][]byte) error { return nil }

// downBreakerOpen is why a peer cannot acknowledge an ack-waiting Submit now.
const downBreakerOpen = "circuit breaker open"

// Publish offers events to every peer's batcher and returns once each batcher's
// acceptor has them. The peer set is read once: track (if set) sees the peers the
// events are offered to.
func (m *Mesh) Publish(ctx context.Context, events []batcher.Task[wire.Outgoing], track func(dests, down []string)) error {
	links := *m.links.Load()
	if track != nil {
		dests := make([]string, len(links))
		var down []string
		for i, l := range links {
			dests[i] = l.addr
			if l.br.State() == breaker.Open {
				if down == nil {
					down = make([]string, len(links))
				}
				down[i] = downBreakerOpen
			}
		}
		track(dests, down)
	}
	for _, l := range links {
		if err := l.b.Offer(ctx, events); err != nil {
			return fmt.Errorf("queue for peer %s: %w", l.addr, err)
		}
	}
	return nil
}

// Drain waits until every peer's queues are empty, or ctx is done, and counts what
// was sent meanwhile and what was left (one per peer the event was queued for). The
// node stops taking submissions and peer traffic first.
func (m *Mesh) Drain(ctx context.Context) (dests int, sent, unsent uint64, err error) {
	links := *m.links.Load()
	before := make([]batcher.Stats, len(links))
	for i, l := range links {
		before[i] = l.b.Stats()
	}
	var errs []error
	for _, l := range links {
		if err := l.b.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("peer %s: %w", l.addr, err))
		}
	}
	for i, l := range links {
		a, b := l.b.Stats(), before[i]
		sent += (a.Succeeded - b.Succeeded) + (a.Stale - b.Stale)
		unsent += (a.Overflow - b.Overflow) + (a.Expired - b.Expired) + (a.Permanent - b.Permanent) +
			a.AcceptorQueue + a.ReprocessQueue + a.Pending + a.InFlight
	}
	return len(links), sent, unsent, errors.Join(errs...)
}

// Close stops every goroutine of the mesh and waits for them, then closes the links:
// tasks still queued end FateStopped (counted). Idempotent.
func (m *Mesh) Close() {
	m.closed.Do(func() {
		m.members.mu.Lock()
		m.members.closed = true // the peer set no longer changes
		m.members.mu.Unlock()
		m.cancel()
		m.wg.Wait()
		m.closeLeaving()
		for _, l := range *m.links.Load() {
			l.close()
		}
	})
}

// PeerMessageBytes is Config.PeerMessageBytes of the mesh's configuration.
func (m *Mesh) PeerMessageBytes() int { return m.cfg.PeerMessageBytes() }

// The peer listener's side of anti-entropy: the PeerService handlers call these.

// Digest answers a peer's Digest, and notes a caller that is not in the peer set. The
// handlers refuse the calls while the node drains.
func (m *Mesh) Digest(req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	m.NoteCaller(req.GetNodeId())
	return m.syncer.Digest(req)
}

// Pull answers a peer's Pull with send.
func (m *Mesh) Pull(req *fanoutv1.PullRequest, send func(*fanoutv1.PullResponse) error) error {
	return m.syncer.Pull(req, send)
}

// Push stores a peer's Push (node.Apply). The caller authorizes it first.
func (m *Mesh) Push(req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	return m.syncer.Push(req)
}
