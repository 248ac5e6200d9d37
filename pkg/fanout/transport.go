package fanout

import (
	"context"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/state"
	"github.com/prometheus/client_golang/prometheus"
)

// Transport carries this node's accepted events to the other nodes and brings theirs
// back. The node keeps the state table, versions, the ack policies and their
// purgatory; a transport keeps everything about reaching the others. The mesh
// (pkg/mesh: a batcher, a breaker and a connection per peer, anti-entropy) is the
// first; a broker-backed one (a JetStream stream and its feed) implements the same
// methods without touching the node.
//
// # The contract
//
// Construction. Config.NewTransport is called once by New, on New's goroutine, after
// the state table and the clock are ready (a data dir is loaded) and before any other
// goroutine of the node runs. It gets the node, whose side of the seam is:
//
//   - Apply(from, entries): the one path by which received events reach the state
//     table. The transport calls it from any goroutine, concurrently; it validates
//     every entry, resolves last-writer-wins and refuses the whole batch (an error
//     naming the entry) if one entry is bad. A transport fetches a snapshot at start
//     (the mesh's bootstrap, a stream's last message per key) through it too.
//     An entry of this node's origin that the table holds (an echo: a feed brings
//     back this node's own events too) is skipped, as is one this process never
//     wrote; one an earlier process wrote is restored. The mesh's live path,
//     Replicate, takes the same apply path with one verdict per event instead of a
//     whole-batch refusal (apply.go).
//   - AckFates(): the function the transport reports each event's fate at each
//     destination to (called per event per destination, on the transport's own
//     goroutines; it takes short locks and never blocks). Every event a Publish
//     handed to a destination gets exactly one final fate there: FateSucceeded or
//     FateStale acknowledge it, FateOverridden says a newer version of the key
//     replaced it (the newer one's fate answers for it), the others drop or fail it.
//   - ID, Incarnation, Table, Draining: read-only facts; Table is for reading (a
//     digest, a scan), never for writing (Apply writes).
//
// Sending. Submit calls Publish once per request, on the caller's goroutine, with
// the events the table accepted. The slice and the events' bytes are shared by every
// destination and read-only: the transport may keep them (until each event's fate)
// but never changes them.
//
// Acks. A Submit with ack ONE, QUORUM or ALL counts destinations: Destinations says
// how many there are (0: every policy is met at once), and Publish, given track,
// calls it first, once, with the destinations it hands these events to and, if any
// cannot acknowledge now, down: for each destination why not ("" if it can: e.g.
// "circuit breaker open"); down is nil when all can.
// The node registers its waiters there, before any fate can be reported.
//
// Readiness, drain, status. Ready is closed once the transport has brought the node
// up to date at start (or gave up waiting); Readiness says whether the transport is
// ready and why in words. Drain stops nothing new from being published (the node
// refuses Submits first) and waits until what was published has left, or ctx ends.
// Peers is one status row per destination; the Collector methods export the
// transport's series on the node's registry. Close stops every goroutine the
// transport started and waits for them; events not yet sent end with their fates.
// The node calls Close once, from its own Close, after its own goroutines ended.
type Transport interface {
	// Destinations is how many destinations a Publish would hand events to now.
	Destinations() int
	// Admit refuses a Submit this transport cannot carry, before the node stores any
	// of it: an ack policy it cannot observe, or an event bigger than it takes
	// (events are the events' bytes as the app sent them; the node may append a
	// version of up to 11 bytes). nil admits it; a refusal is an *InvalidError naming
	// the field. It is on the seam because only the transport knows these bounds (a
	// broker's max_payload; whether peers' receipt is visible at all), and a refusal
	// after the table stored the events would leave them on this node alone.
	Admit(ack fanoutv1.AckPolicy, events [][]byte) error
	// Publish hands one Submit's accepted events to every destination and returns
	// once each has them queued, or ctx ends. track, if not nil, is called first (see
	// the contract).
	Publish(ctx context.Context, events []batcher.Task[wire.Outgoing], track func(dests, down []string)) error
	// Ready is closed once the node's start-up sync has ended.
	Ready() <-chan struct{}
	// Readiness reports whether the transport is ready, and why (or why not).
	Readiness() (ready bool, reason string)
	// Drain waits until the published events have left, or ctx ends. It reports the
	// destinations, the events sent during the drain, and those left unsent (one per
	// destination each).
	Drain(ctx context.Context) (dests int, sent, unsent uint64, err error)
	// Peers is the status of every destination, for GetStatus.
	Peers() []*fanoutv1.PeerStatus
	// Status describes the transport itself, for GetStatus: its kind and, for a
	// broker, where it is connected and how far its feed is.
	Status() *fanoutv1.TransportStatus
	// Describe and Collect export the transport's series (prometheus.Collector).
	prometheus.Collector
	// Close stops the transport and waits for it. Idempotent.
	Close()
}

// AckFates is the function a transport reports each event's fate at each destination
// to: see Transport. It is the ack ledger's, so a fate costs one atomic load while no
// Submit waits.
func (n *Node) AckFates() func(dest string, t *batcher.Task[wire.Outgoing], fate batcher.Fate) {
	return n.ackFinal
}

// Incarnation is this node process's random id (never 0): a peer that answers with
// this node's id and another incarnation is another process.
func (n *Node) Incarnation() uint64 { return n.incarnation }

// Table is the node's state table, for transports to read (a digest, a scan). Write
// it only through Apply.
func (n *Node) Table() *state.Table { return n.table }

// loneTransport is the transport of a node without Config.NewTransport: it has no
// destinations and is ready at once.
type loneTransport struct{ ready chan struct{} }

func newLoneTransport() *loneTransport {
	t := &loneTransport{ready: make(chan struct{})}
	close(t.ready)
	return t
}

func (*loneTransport) Destinations() int                        { return 0 }
func (*loneTransport) Admit(fanoutv1.AckPolicy, [][]byte) error { return nil }
func (*loneTransport) Publish(_ context.Context, _ []batcher.Task[wire.Outgoing], track func(dests, down []string)) error {
	if track != nil {
		track(nil, nil)
	}
	return nil
}
func (t *loneTransport) Ready() <-chan struct{} { return t.ready }
func (*loneTransport) Readiness() (bool, string) {
	return true, "ready: no peers to sync with"
}
func (*loneTransport) Drain(context.Context) (int, uint64, uint64, error) { return 0, 0, 0, nil }
func (*loneTransport) Peers() []*fanoutv1.PeerStatus                      { return nil }
func (*loneTransport) Status() *fanoutv1.TransportStatus {
	return &fanoutv1.TransportStatus{Kind: "none"}
}
func (*loneTransport) Describe(chan<- *prometheus.Desc) {}
func (*loneTransport) Collect(chan<- prometheus.Metric) {}
func (*loneTransport) Close()                           {}

var _ Transport = (*loneTransport)(nil)

// Durable is the revision up to which the table's changes are on disk (--data-dir):
// a transport that saves how far it has read (its position) saves only a position
// whose changes are durable, so that after a crash it never resumes past something
// the table lost. Without a data dir it is the table's revision (nothing is kept).
func (n *Node) Durable() uint64 {
	if n.persist == nil {
		return n.table.Revision()
	}
	return n.persist.Durable()
}
