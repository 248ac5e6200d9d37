package fanout

import (
	"context"
	"github.com/fanout/fanout/internal/waiton"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/persist"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
)

// The waits of these tests (internal/waiton).
const waitTimeout = waiton.Timeout

var waitOn = waiton.On

type tally = waiton.Tally

// How these tests wait: on the event that makes a condition true (a table's change,
// a stream counted, a fake peer's call, a fate, a log line, a batcher drained), each
// wait bounded by waitTimeout. Only the batchers' published counters have no event
// (pollStats).

// tableChanged is a waitOn next for a condition on tbl.
func tableChanged(tbl *state.Table) func() <-chan struct{} {
	return func() <-chan struct{} { return tbl.Changed(tbl.Revision()) }
}

// statsPoll is how often pollStats looks again.
const statsPoll = 10 * time.Millisecond

// pollStats waits until cond, on a peer's batcher counters (PeerStatus), holds,
// looking every statsPoll, failing the test after waitTimeout. No event announces
// those counters: the batcher's acceptor publishes them at the end of each step, after
// the fates of the step were reported, and a batcher that does not empty (a peer held
// back, a breaker open) gives no Drain to wait on. Use it only then.
func pollStats(t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(statsPoll)
	defer tick.Stop()
	deadline := time.After(waitTimeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
	}
}

// drained waits until every peer batcher of tn's mesh is empty, every event sent or
// given its fate (mesh.Drain): the batchers publish their counters before they say so,
// so cond, on those counters, must hold then; the test fails if it does not.
func drained(t testing.TB, tn *testNode, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, _, _, err := tn.mesh.Drain(ctx); err != nil {
		t.Fatalf("waiting for %s: the peers' batchers did not empty: %v", what, err)
	}
	if !cond() {
		t.Fatalf("%s: does not hold once the peers' batchers are empty (status %v)", what, tn.node.Status().GetPeers())
	}
}

// watchedConn is a peer connection that counts its Replicate calls (as they start) and
// its Close, for a test to wait on.
type watchedConn struct {
	mesh.Conn
	calls, closes *tally
}

func (c watchedConn) ReplicateFrame(ctx context.Context, f *frame.Frame, events int, mayHold bool) (*fanoutv1.ReplicateResponse, bool, error) {
	c.calls.Add()
	return c.Conn.ReplicateFrame(ctx, f, events, mayHold)
}

func (c watchedConn) Close() error {
	err := c.Conn.Close()
	c.closes.Add()
	return err
}

// connWatch counts the calls and closes of the connections a dialer made, by address.
type connWatch struct {
	mu    sync.Mutex
	addrs map[string]*watchedConn
}

// wrap returns dial, its connections watched.
func (w *connWatch) wrap(dial func(string) (mesh.Conn, error)) func(string) (mesh.Conn, error) {
	return func(addr string) (mesh.Conn, error) {
		conn, err := dial(addr)
		if err != nil {
			return nil, err
		}
		wc := w.of(addr)
		return watchedConn{Conn: conn, calls: wc.calls, closes: wc.closes}, nil
	}
}

// of is the counters of the connections to addr.
func (w *connWatch) of(addr string) *watchedConn {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.addrs == nil {
		w.addrs = map[string]*watchedConn{}
	}
	wc, ok := w.addrs[addr]
	if !ok {
		wc = &watchedConn{calls: &tally{}, closes: &tally{}}
		w.addrs[addr] = wc
	}
	return wc
}

// fateNode is the node as its mesh sees it, with every fate the mesh reports also
// told to onFate (nodeConfig.onFate): a test waits on a fate instead of the batcher's
// counters, which are published a step later.
type fateNode struct {
	*Node
	onFate func(dest string, t *batcher.Task[wire.Outgoing], f batcher.Fate)
}

func (n fateNode) AckFates() func(dest string, t *batcher.Task[wire.Outgoing], f batcher.Fate) {
	final := n.Node.AckFates()
	return func(dest string, t *batcher.Task[wire.Outgoing], f batcher.Fate) {
		final(dest, t, f)
		n.onFate(dest, t, f)
	}
}

// watchedStore is a data dir's store that counts the deletes it committed.
type watchedStore struct {
	persist.Store
	deleted *tally
}

func (s watchedStore) Commit(puts []store.Record, deletes [][]byte) error {
	if err := s.Store.Commit(puts, deletes); err != nil {
		return err
	}
	for range deletes {
		s.deleted.Add()
	}
	return nil
}
