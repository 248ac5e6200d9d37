package fanout

import (
	"context"
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/protobuf/proto"
)

// BenchmarkSubmitQueued measures the app listener's Submit with the default QUEUED
// policy, from the request's bytes to the response's (Node.SubmitBytes): read and
// validate, version, record, and offer to the peers' batchers, whose fake peers
// answer OK at once. peers=0 is the node's own share alone: with peers, the fake
// peers' decoding of every Replicate weighs in allocs/op. Keys cycle over 1,000.
func BenchmarkSubmitQueued(b *testing.B) {
	for _, npeers := range []int{0, 2} {
		for _, batch := range []int{1, 100} {
			b.Run(fmt.Sprintf("peers=%d/batch=%d", npeers, batch), func(b *testing.B) {
				fake := peers.NewFakeNetwork()
				ok := func(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
					return &fanoutv1.ReplicateResponse{NodeId: "p", Statuses: make([]fanoutv1.ItemStatus, len(req.Events))}, nil
				}
				var addrs []string
				for i := range npeers {
					addrs = append(addrs, fmt.Sprintf("p%d", i))
					fake.Handle(addrs[i], ok)
				}
				cfg := testConfig("a", addrs...)
				cfg.Batcher.MaxBuffer = 1 << 20
				cfg.Dial = func(addr string) (Replicator, error) { return fake.Dial(addr), nil }
				n, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer n.Close()
				payload := make([]byte, 100)
				reqs := make([][]byte, 1000/batch)
				for i := range reqs {
					req := &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, batch)}
					for k := range req.Events {
						req.Events[k] = &fanoutv1.Event{TaskId: fmt.Sprintf("task-%d", i*batch+k), Payload: payload}
					}
					if reqs[i], err = proto.Marshal(req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					if _, err := n.SubmitBytes(context.Background(), reqs[i%len(reqs)]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
