package grpcapi

import (
	"context"
	"github.com/fanout/fanout/internal/waiton"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// The waits of these tests (internal/waiton).
const waitTimeout = waiton.Timeout

var waitOn = waiton.On

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testNode is a Node served over bufconn, the way handler tests exercise the real gRPC
// stack without sockets.
type testNode struct {
	node *fanout.Node
	mesh *mesh.Mesh // the node's transport
	app  fanoutv1.FanoutServiceClient
	peer fanoutv1.PeerServiceClient
	cc   *grpc.ClientConn
}

// nodeConfig is a node's configuration and its mesh's (its transport), as the tests
// set them.
type nodeConfig struct {
	fanout.Config
	Mesh mesh.Config
}

func testConfig(id string, peerAddrs ...string) nodeConfig {
	cfg := nodeConfig{Config: fanout.DefaultConfig(), Mesh: mesh.DefaultConfig()}
	cfg.NodeID = id
	cfg.Mesh.Peers = peerAddrs
	cfg.Mesh.Batcher.Workers = 2
	cfg.Mesh.Batcher.CongestionRetryDelay = 5 * time.Millisecond
	cfg.Mesh.Batcher.NetworkFailureRetryDelay = 5 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

// newMeshNode builds the node of cfg with its mesh, as the sidecar wires them.
func newMeshNode(cfg nodeConfig) (*fanout.Node, *mesh.Mesh, error) {
	mc := cfg.Mesh
	mc.EventBytes, mc.MaxEventBytes, mc.MaxTaskIDBytes = cfg.Limits.EventBytes(), cfg.Limits.MaxEventBytes, cfg.Limits.MaxTaskIDBytes
	mc.Logger = cfg.Logger
	var m *mesh.Mesh
	cfg.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
		var err error
		if m, err = mesh.New(mc, n); err != nil {
			return nil, err
		}
		return m, nil
	}
	cfg.OnReplicate = func(origin string) { m.NoteCaller(origin) }
	n, err := fanout.New(cfg.Config)
	return n, m, err
}

// startTestNode starts a node and serves it; ps, if set, is given the PeerServer
// before it is registered (a test's caller identities).
func startTestNode(t *testing.T, cfg nodeConfig, ps func(*PeerServer)) *testNode {
	t.Helper()
	n, m, err := newMeshNode(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(frame.ServerOption())
	RegisterFanoutServer(srv, NewFanoutServer(n))
	p := NewPeerServer(n, m)
	if ps != nil {
		ps(p)
	}
	RegisterPeerServer(srv, p)
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		frame.DialOption()) // tests send raw frames
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		cc.Close()
		n.Close()
		srv.Stop()
		<-served
	})
	return &testNode{node: n, mesh: m, app: fanoutv1.NewFanoutServiceClient(cc), peer: fanoutv1.NewPeerServiceClient(cc), cc: cc}
}

// cluster wires len(ids) nodes through a FakeNetwork, each answering with its
// PeerServer's Replicate: node i's peers are the others, addressed by id.
func cluster(t *testing.T, ids []string) map[string]*testNode {
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
		tn := startTestNode(t, cfg, nil)
		nodes[id] = tn
		fake.Handle(id, NewPeerServer(tn.node, tn.mesh).Replicate)
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
	waitOn(t, "subscriber registered", tn.node.SubscribersChanged, func() bool { return tn.node.Status().GetSubscribers() > 0 })
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

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), field) {
		t.Fatalf("err = %v; want INVALID_ARGUMENT naming %s", err, field)
	}
}

// stored reports whether n's table holds key (live).
func stored(t *testing.T, n *fanout.Node, key string) bool {
	t.Helper()
	resp, err := n.Get(&fanoutv1.GetRequest{TaskIds: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.GetEntries()) == 1
}
