package fanout

import (
	"context"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testNode is a Node with in-process clients that call it as its listeners do
// (client_test.go): the node's package knows no gRPC, and pkg/grpcapi's tests serve
// it over bufconn.
type testNode struct {
	node *Node
	mesh *mesh.Mesh // the node's transport
	app  appClient
	peer peerClient
}

// nodeConfig is a node's configuration and its mesh's (its transport, pkg/mesh), as
// the tests set them. Its Logger, unless Mesh.Logger is set, is both's.
type nodeConfig struct {
	Config
	Mesh mesh.Config
	// onFate, if set, is told every fate the mesh reports, after the node (fateNode).
	onFate func(dest string, t *batcher.Task[wire.Outgoing], f batcher.Fate)
}

func testConfig(id string, peerAddrs ...string) nodeConfig {
	cfg := nodeConfig{Config: DefaultConfig(), Mesh: mesh.DefaultConfig()}
	cfg.NodeID = id
	cfg.Mesh.Peers = peerAddrs
	cfg.Mesh.Batcher.Workers = 2
	cfg.Mesh.Batcher.CongestionRetryDelay = 5 * time.Millisecond
	cfg.Mesh.Batcher.NetworkFailureRetryDelay = 5 * time.Millisecond
	cfg.Logger = discardLogger()
	return cfg
}

// newMeshNode builds the node of cfg with its mesh, as the sidecar wires them.
func newMeshNode(cfg nodeConfig) (*Node, *mesh.Mesh, error) {
	mc := cfg.Mesh
	mc.EventBytes, mc.MaxEventBytes, mc.MaxTaskIDBytes = cfg.Limits.EventBytes(), cfg.Limits.MaxEventBytes, cfg.Limits.MaxTaskIDBytes
	if mc.Logger == nil {
		mc.Logger = cfg.Logger
	}
	if mc.Now == nil {
		mc.Now = cfg.Now
	}
	var m *mesh.Mesh
	cfg.NewTransport = func(n *Node) (Transport, error) {
		var mn mesh.Node = n
		if cfg.onFate != nil {
			mn = fateNode{n, cfg.onFate}
		}
		var err error
		if m, err = mesh.New(mc, mn); err != nil {
			return nil, err
		}
		return m, nil
	}
	cfg.OnReplicate = func(origin string) { m.NoteCaller(origin) }
	n, err := New(cfg.Config)
	return n, m, err
}

// newNode is newMeshNode for a test that needs no handle on the mesh.
func newNode(cfg nodeConfig) (*Node, error) {
	n, _, err := newMeshNode(cfg)
	return n, err
}

func startTestNode(t *testing.T, cfg nodeConfig) *testNode {
	t.Helper()
	n, m, err := newMeshNode(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(n.Close)
	return &testNode{node: n, mesh: m, app: appClient{n}, peer: peerClient{n, m}}
}

// cluster wires len(ids) nodes through a FakeNetwork: node i's peers are the others,
// addressed by id.
func cluster(t *testing.T, ids []string, tweak func(*nodeConfig)) map[string]*testNode {
	t.Helper()
	fake := peers.NewFakeNetwork()
	nodes := make(map[string]*testNode)
	for _, id := range ids {
		var others []string
		for _, o := range ids {
			if o != id {
				others = append(others, o)
			}
		}
		cfg := testConfig(id, others...)
		cfg.Mesh.Dial = func(addr string) (mesh.Conn, error) { return fake.Dial(addr), nil }
		if tweak != nil {
			tweak(&cfg)
		}
		tn := startTestNode(t, cfg)
		nodes[id] = tn
		fake.Handle(id, tn.peer.Replicate)
	}
	return nodes
}

// subscribe opens a Subscribe stream and returns a channel of what it receives.
func subscribe(t *testing.T, tn *testNode, prefix string) <-chan *fanoutv1.SubscribeResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := tn.app.Subscribe(ctx, &fanoutv1.SubscribeRequest{TaskIdPrefix: prefix})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	ch := make(chan *fanoutv1.SubscribeResponse, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			ch <- r
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	// Wait until the server has registered the stream, so nothing is missed.
	waitOn(t, "subscriber registered", tn.node.SubscribersChanged, func() bool { return tn.node.subscribers.Load() > 0 })
	return ch
}

func recv(t *testing.T, ch <-chan *fanoutv1.SubscribeResponse) *fanoutv1.SubscribeResponse {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("subscribe stream ended")
		}
		return r
	case <-time.After(waitTimeout):
		t.Fatalf("no delivery within %s", waitTimeout)
	}
	return nil
}

func ev(id string, payload string) *fanoutv1.Event {
	return &fanoutv1.Event{TaskId: id, Payload: []byte(payload)}
}
