package fanout_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/grpcapi"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
)

// benchPair starts receiver "b" on a real loopback TCP listener and origin "a" whose
// peer is b, with the given worker count, and a subscriber on b that counts. unary:
// batches go as unary Replicate calls instead of on a ReplicateStream.
func benchPair(b *testing.B, workers int, unary bool) (*fanout.Node, *fanout.Node, <-chan struct{}, func()) {
	b.Helper()
	// Every event has its own key, and b.N passed a million (the default
	// --state-max-keys) at 2 s of -benchtime: a full table refuses new keys, and the
	// benchmark waited forever for events never sent. Both tables get room for 8M.
	roomy := func(cfg *fanout.NodeConfig) {
		cfg.State.MaxKeys = 8 << 20
		cfg.State.MaxBytes = 4 << 30
	}
	recvCfg := fanout.TestConfig("b")
	roomy(&recvCfg)
	nb, mb, err := fanout.NewMeshNode(recvCfg)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(frame.ServerOptions()...)
	grpcapi.RegisterPeerServer(srv, grpcapi.NewPeerServer(nb, mb))
	go srv.Serve(lis)

	sendCfg := fanout.TestConfig("a", lis.Addr().String())
	sendCfg.Mesh.Batcher.Workers = workers
	sendCfg.Mesh.Batcher.MaxBuffer = 100_000
	roomy(&sendCfg)
	sendCfg.Mesh.Dial = func(addr string) (mesh.Conn, error) {
		return peers.Dial(addr, peers.Options{MaxMessageBytes: 64 << 20, Unary: unary})
	}
	na, _, err := fanout.NewMeshNode(sendCfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan struct{}, 1<<16)
	done := make(chan struct{})
	go func() { // one entry per frame (max_batch 0)
		defer close(done)
		_ = nb.Subscribe(ctx, &fanoutv1.SubscribeRequest{}, func([]byte) error {
			select {
			case got <- struct{}{}:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	// The stream reads changes after the revision it registers at: an event stored
	// before would be missed, and the benchmark would wait for it forever (it did, once
	// in ~15 runs on a loaded machine).
	deadline := time.After(10 * time.Second) // generous: a busy machine
	for {
		counted := nb.SubscribersChanged()
		if nb.Status().GetSubscribers() > 0 {
			break
		}
		select {
		case <-counted:
		case <-deadline:
			b.Fatal("the subscriber on b was not counted within 10s")
		}
	}
	return na, nb, got, func() {
		cancel()
		<-done
		na.Close()
		nb.Close()
		srv.Stop()
	}
}

// protocols are the two ways a batch travels, for the benchmarks' A/B.
var protocols = []struct {
	name  string
	unary bool
}{{"stream", false}, {"unary", true}}

// appendSubmitRequest appends a SubmitRequest of k events with task_ids t-<first>...
// and the payload, as an app's client would encode it, without allocating: the
// benchmarks give the node the request's bytes, as its app listener does.
func appendSubmitRequest(b []byte, first, k int, payload []byte) []byte {
	var ev, idb [64]byte
	for i := range k {
		e := protowire.AppendTag(ev[:0], wire.EventTaskID, protowire.BytesType)
		id := strconv.AppendInt(append(idb[:0], "t-"...), int64(first+i), 10)
		e = protowire.AppendBytes(e, id)
		b = protowire.AppendTag(b, wire.SubmitRequestEvents, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(e)+protowire.SizeTag(wire.EventPayload)+protowire.SizeBytes(len(payload))))
		b = append(b, e...)
		b = protowire.AppendTag(b, wire.EventPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, payload)
	}
	return b
}

// BenchmarkPipeline measures events/s from a Submit's bytes (Node.SubmitBytes, what the
// app listener runs) on one node to the subscriber
// queue of its peer over loopback gRPC, unique task_ids, 100-byte payloads, by workers
// per peer and by protocol (ReplicateStream or unary Replicate calls). It is how the
// default of --workers was chosen (docs/BENCHMARKS.md).
func BenchmarkPipeline(b *testing.B) {
	for _, p := range protocols {
		for _, workers := range []int{1, 2, 4, 8, 20} {
			b.Run(fmt.Sprintf("proto=%s/workers=%d", p.name, workers), func(b *testing.B) {
				na, _, got, stop := benchPair(b, workers, p.unary)
				defer stop()
				const perReq = 100
				// A window of outstanding events keeps the sender under --max-buffer, so
				// nothing is evicted and every event is counted once.
				window := make(chan struct{}, 20_000)
				payload := make([]byte, 100)
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				go func() {
					var req []byte
					for i := 0; i < b.N; i += perReq {
						k := min(perReq, b.N-i)
						for range k {
							window <- struct{}{}
						}
						req = appendSubmitRequest(req[:0], i, k, payload)
						if _, err := na.SubmitBytes(context.Background(), req); err != nil {
							panic(err)
						}
						if got := na.AcceptedEvents(); got != uint64(i+k) {
							panic(fmt.Sprintf("%d of %d events accepted: the benchmark would wait for the others forever", got, i+k))
						}
					}
				}()
				for range b.N {
					<-got
					<-window
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkRoundTrip measures one event at a time from a Submit's bytes to the peer's
// subscriber queue (the next is submitted once the last arrived): the fixed cost of a
// batch of one, where a unary call's headers, trailers and stream setup weigh most.
// ns/op is the latency of the path; allocs/op counts both nodes.
func BenchmarkRoundTrip(b *testing.B) {
	for _, p := range protocols {
		b.Run("proto="+p.name, func(b *testing.B) {
			na, _, got, stop := benchPair(b, 8, p.unary)
			defer stop()
			payload := make([]byte, 100)
			b.ReportAllocs()
			b.ResetTimer()
			var req []byte
			for i := range b.N {
				req = appendSubmitRequest(req[:0], i, 1, payload)
				if _, err := na.SubmitBytes(context.Background(), req); err != nil {
					b.Fatal(err)
				}
				<-got
			}
		})
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
			cfg := fanout.TestConfig("a", "p1", "p2")
			cfg.Mesh.Batcher.MaxBuffer = 1 << 20
			cfg.State.MaxKeys = 8 << 20
			cfg.State.MaxBytes = 4 << 30
			cfg.Mesh.Dial = func(addr string) (mesh.Conn, error) { return fake.Dial(addr), nil }
			n, _, err := fanout.NewMeshNode(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := grpc.NewServer(frame.ServerOptions()...)
			grpcapi.RegisterFanoutServer(srv, grpcapi.NewFanoutServer(n))
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
