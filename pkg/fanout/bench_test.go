package fanout

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc"
)

// benchPair starts receiver "b" on a real loopback TCP listener and origin "a" whose
// peer is b, with the given worker count, and a subscriber on b that counts.
func benchPair(b *testing.B, workers int) (*Node, *Node, <-chan struct{}, func()) {
	b.Helper()
	recvCfg := testConfig("b")
	nb, err := New(recvCfg)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(peers.FrameServerOption())
	RegisterPeerServer(srv, NewPeerServer(nb))
	go srv.Serve(lis)

	sendCfg := testConfig("a", lis.Addr().String())
	sendCfg.Batcher.Workers = workers
	sendCfg.Batcher.MaxBuffer = 100_000
	sendCfg.Dial = func(addr string) (Replicator, error) {
		return peers.Dial(addr, peers.Options{MaxMessageBytes: 64 << 20})
	}
	na, err := New(sendCfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan struct{}, 1<<16)
	done := make(chan struct{})
	go func() { // one entry per frame (max_batch 0)
		defer close(done)
		_ = nb.Subscribe(ctx, &fanoutv1.SubscribeRequest{}, func(*peers.Frame) error {
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
	for nb.subscribers.Load() == 0 {
		time.Sleep(time.Millisecond) // polling interval, not a wait for an event
	}
	return na, nb, got, func() {
		cancel()
		<-done
		na.Close()
		nb.Close()
		srv.Stop()
	}
}

// BenchmarkPipeline measures events/s from Node.Submit on one node to the subscriber
// queue of its peer over loopback gRPC, unique task_ids, 100-byte payloads, by workers
// per peer. It is how the default of --workers was chosen (docs/BENCHMARKS.md).
func BenchmarkPipeline(b *testing.B) {
	for _, workers := range []int{1, 2, 4, 8, 20} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			na, _, got, stop := benchPair(b, workers)
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
				for i := 0; i < b.N; i += perReq {
					req := &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, min(perReq, b.N-i))}
					for k := range req.Events {
						window <- struct{}{}
						req.Events[k] = &fanoutv1.Event{TaskId: fmt.Sprintf("t-%d", i+k), Payload: payload}
					}
					if _, err := na.Submit(context.Background(), req); err != nil {
						panic(err)
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
