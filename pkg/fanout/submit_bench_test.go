package fanout

import (
	"context"
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/peers"
)

// BenchmarkSubmitQueued measures Node.Submit with the default QUEUED policy: validate,
// version, record, and offer to two peer batchers whose fake peers answer OK at once.
// It is the before/after check that ack support did not slow the QUEUED path.
func BenchmarkSubmitQueued(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			fake := peers.NewFakeNetwork()
			ok := func(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
				return &fanoutv1.ReplicateResponse{NodeId: "p", Statuses: make([]fanoutv1.ItemStatus, len(req.Events))}, nil
			}
			fake.Handle("p1", ok)
			fake.Handle("p2", ok)
			cfg := testConfig("a", "p1", "p2")
			cfg.Batcher.MaxBuffer = 1 << 20
			cfg.Dial = func(addr string) (Replicator, error) { return fake.Dial(addr), nil }
			n, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			payload := make([]byte, 100)
			ids := make([]string, 1000)
			for i := range ids {
				ids[i] = fmt.Sprintf("task-%d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, batch)}
				for k := range req.Events {
					req.Events[k] = &fanoutv1.Event{TaskId: ids[(i*batch+k)%len(ids)], Payload: payload}
				}
				if _, err := n.Submit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
