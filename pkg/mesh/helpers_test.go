package mesh

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/grpcapi"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

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

// waitFor polls cond until it holds or 5s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not a wait for an event
	}
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
