package fanout

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// BenchmarkSubmitQueued measures the app listener's Submit with the default QUEUED
// policy, from the request's bytes to the response's (Node.submitFrame): read and
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
				f := new(frame.Frame)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					f.B = reqs[i%len(reqs)]
					if _, err := n.submitFrame(context.Background(), f); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSubmitGRPC measures the app listener's Submit over loopback gRPC: a client
// calls FanoutService.Submit with batch events of 100 bytes (new keys), and the node
// validates, versions, stores and queues them for two fake peers that answer OK at
// once. ns/op is CPU per call (16 calls in flight), and with allocs/op it counts client and server together: the client's
// share is the same whatever the server does with the request's bytes, so an A/B of
// two server revisions measures the server's (docs/BENCHMARKS.md, issue 13 item 3).
func BenchmarkSubmitGRPC(b *testing.B) {
	for _, batch := range []int{1, 10} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			fake := peers.NewFakeNetwork()
			ok := func(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
				return &fanoutv1.ReplicateResponse{NodeId: "p", Statuses: make([]fanoutv1.ItemStatus, len(req.Events))}, nil
			}
			fake.Handle("p1", ok)
			fake.Handle("p2", ok)
			cfg := testConfig("a", "p1", "p2")
			cfg.Batcher.MaxBuffer = 1 << 20
			cfg.State.MaxKeys = 8 << 20
			cfg.State.MaxBytes = 4 << 30
			cfg.Dial = func(addr string) (Replicator, error) { return fake.Dial(addr), nil }
			n, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(frame.ServerOptions()...)
			RegisterFanoutServer(srv, NewFanoutServer(n))
			go srv.Serve(lis)
			defer srv.Stop()
			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			client := fanoutv1.NewFanoutServiceClient(cc)
			payload := make([]byte, 100)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8) // 16 calls in flight on 2 cores: the CPU, not the round trip, bounds ns/op
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req := &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, batch)}
				for pb.Next() {
					i := int(next.Add(1))
					for k := range req.Events {
						req.Events[k] = &fanoutv1.Event{TaskId: "t-" + strconv.Itoa(i*batch+k), Payload: payload}
					}
					resp, err := client.Submit(context.Background(), req)
					if err != nil {
						panic(err)
					}
					if len(resp.GetResults()) != batch || resp.GetResults()[0].GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
						panic(fmt.Sprintf("not accepted: %v", resp))
					}
				}
			})
		})
	}
}
