package fanout

import (
	"context"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/peers"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testNode is a Node with in-process clients that call it as its listeners do
// (client_test.go): the node's package knows no gRPC, and pkg/grpcapi's tests serve
// it over bufconn.
type testNode struct {
	node *Node
	app  appClient
	peer peerClient
}

func testConfig(id string, peerAddrs ...string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.Peers = peerAddrs
	cfg.Batcher.Workers = 2
	cfg.Batcher.CongestionRetryDelay = 5 * time.Millisecond
	cfg.Batcher.NetworkFailureRetryDelay = 5 * time.Millisecond
	cfg.Logger = discardLogger()
	return cfg
}

func startTestNode(t *testing.T, cfg Config) *testNode {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(n.Close)
	return &testNode{node: n, app: appClient{n}, peer: peerClient{n}}
}

// cluster wires len(ids) nodes through a FakeNetwork: node i's peers are the others,
// addressed by id.
func cluster(t *testing.T, ids []string, tweak func(*Config)) map[string]*testNode {
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
		cfg.Dial = func(addr string) (Replicator, error) { return fake.Dial(addr), nil }
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
	waitFor(t, "subscriber registered", func() bool { return tn.node.subscribers.Load() > 0 })
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
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery within 5s")
	}
	return nil
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

func ev(id string, payload string) *fanoutv1.Event {
	return &fanoutv1.Event{TaskId: id, Payload: []byte(payload)}
}
