package mesh

import (
	"context"
	"github.com/fanout/fanout/internal/waiton"
	"io"
	"log/slog"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/grpcapi"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// The waits of these tests (internal/waiton).
const waitTimeout = waiton.Timeout

var waitOn = waiton.On

type tally = waiton.Tally

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// nodeConfig is a mesh's configuration and its node's (Node), as the tests set them.
type nodeConfig struct {
	Config
	Node fanout.Config
}

func testConfig(id string, peerAddrs ...string) nodeConfig {
	cfg := nodeConfig{Config: DefaultConfig(), Node: fanout.DefaultConfig()}
	cfg.Node.NodeID = id
	cfg.Node.Logger = discardLogger()
	cfg.Peers = peerAddrs
	cfg.Batcher.Workers = 2
	cfg.Batcher.CongestionRetryDelay = 5 * time.Millisecond
	cfg.Batcher.NetworkFailureRetryDelay = 5 * time.Millisecond
	return cfg
}

// member is a node with its mesh, and the PeerService handlers of both: what a
// sidecar runs, without the sockets.
type member struct {
	node *fanout.Node
	mesh *Mesh
	peer *grpcapi.PeerServer
}

// startMember builds cfg's node and mesh, wired as the sidecar wires them, and closes
// them at the end of the test.
func startMember(t *testing.T, cfg nodeConfig) *member {
	t.Helper()
	mc, nc := cfg.Config, cfg.Node
	mc.EventBytes, mc.MaxEventBytes, mc.MaxTaskIDBytes = nc.Limits.EventBytes(), nc.Limits.MaxEventBytes, nc.Limits.MaxTaskIDBytes
	if mc.Logger == nil {
		mc.Logger = nc.Logger
	}
	var m *Mesh
	nc.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
		var err error
		if m, err = New(mc, n); err != nil {
			return nil, err
		}
		return m, nil
	}
	nc.OnReplicate = func(origin string) { m.NoteCaller(origin) }
	n, err := fanout.New(nc)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(n.Close)
	return &member{node: n, mesh: m, peer: grpcapi.NewPeerServer(n, m)}
}

// fakeMember starts a node with id on fake at addr, peered with peerAddrs. The fake
// network carries its Replicate calls only (no anti-entropy), unless syncs is set.
func fakeMember(t *testing.T, fake *peers.FakeNetwork, id, addr string, peerAddrs []string, tweak func(*nodeConfig)) *member {
	t.Helper()
	cfg := testConfig(id, peerAddrs...)
	cfg.Dial = func(a string) (Conn, error) { return fake.Dial(a), nil }
	if tweak != nil {
		tweak(&cfg)
	}
	m := startMember(t, cfg)
	fake.Handle(addr, m.peer.Replicate)
	return m
}

func (m *member) submit(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	return m.node.Submit(ctx, req)
}

func peerByAddr(st *fanoutv1.GetStatusResponse, addr string) *fanoutv1.PeerStatus {
	for _, p := range st.GetPeers() {
		if p.GetAddress() == addr {
			return p
		}
	}
	return nil
}

func has(m *member, key string) bool {
	_, ok := m.node.Table().Get([]byte(key))
	return ok
}

func ev(id string, payload string) *fanoutv1.Event {
	return &fanoutv1.Event{TaskId: id, Payload: []byte(payload)}
}

// How these tests wait: on the event that makes a condition true (a table's change,
// a connection's call, a callback, a log line, a batcher drained), each wait bounded
// by waitTimeout. Only a batcher's published counters, and the end of an anti-entropy
// round, have no event (poll).

// pollEvery is how often poll looks again.
const pollEvery = 10 * time.Millisecond

// poll waits until cond holds, looking every pollEvery, failing the test after
// waitTimeout. Only for what no event announces: a batcher's counters (its acceptor
// publishes them at the end of each step) while it does not empty, and the end of an
// anti-entropy round.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(pollEvery)
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

// drained waits until every peer batcher of m's mesh is empty, every event sent or
// given its fate (Mesh.Drain): the batchers publish their counters before they say
// so, so cond, on those counters, must hold then; the test fails if it does not.
func drained(t *testing.T, m *member, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, _, _, err := m.mesh.Drain(ctx); err != nil {
		t.Fatalf("waiting for %s: %s's batchers did not empty: %v", what, m.node.ID(), err)
	}
	if !cond() {
		t.Fatalf("%s: does not hold once %s's batchers are empty (peers %v)", what, m.node.ID(), m.node.Status().GetPeers())
	}
}

// linkDrained waits until l's batcher is empty (Batcher.Drain), then checks cond, on
// its counters, as drained does.
func linkDrained(t *testing.T, l *link, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := l.b.Drain(ctx); err != nil {
		t.Fatalf("waiting for %s: the batcher of %s did not empty: %v", what, l.addr, err)
	}
	if !cond() {
		t.Fatalf("%s: does not hold once the batcher of %s is empty (%+v)", what, l.addr, l.b.Stats())
	}
}

// logLines is a log destination that counts the lines written to it, for a test that
// waits on what the mesh does just before it logs.
type logLines struct{ lines tally }

func (l *logLines) Write(p []byte) (int, error) {
	l.lines.Add()
	return len(p), nil
}

// logger is a text logger to l.
func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// callCounted is a connection that counts its Replicate calls as they start.
type callCounted struct {
	Conn
	calls *tally
}

func (c callCounted) ReplicateFrame(ctx context.Context, f *frame.Frame, events int, mayHold bool) (*fanoutv1.ReplicateResponse, bool, error) {
	c.calls.Add()
	return c.Conn.ReplicateFrame(ctx, f, events, mayHold)
}

// seriesOf counts the node's collector's series that name peer addr.
func seriesOf(t *testing.T, n *fanout.Node, addr string) int {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(fanout.NewCollector(n))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "peer" && lp.GetValue() == addr {
					count++
				}
			}
		}
	}
	return count
}
