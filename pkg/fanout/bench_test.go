package fanout

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
)

// benchPair starts receiver "b" on a real loopback TCP listener and origin "a" whose
// peer is b, with the given worker count, and a subscriber on b that counts. unary:
// batches go as unary Replicate calls instead of on a ReplicateStream.
func benchPair(b *testing.B, workers int, unary bool) (*Node, *Node, <-chan struct{}, func()) {
	b.Helper()
	// Every event has its own key, and b.N passed a million (the default
	// --state-max-keys) at 2 s of -benchtime: a full table refuses new keys, and the
	// benchmark waited forever for events never sent. Both tables get room for 8M.
	roomy := func(cfg *Config) {
		cfg.State.MaxKeys = 8 << 20
		cfg.State.MaxBytes = 4 << 30
	}
	recvCfg := testConfig("b")
	roomy(&recvCfg)
	nb, err := New(recvCfg)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(frame.ServerOptions()...)
	RegisterPeerServer(srv, NewPeerServer(nb))
	go srv.Serve(lis)

	sendCfg := testConfig("a", lis.Addr().String())
	sendCfg.Batcher.Workers = workers
	sendCfg.Batcher.MaxBuffer = 100_000
	roomy(&sendCfg)
	sendCfg.Dial = func(addr string) (Replicator, error) {
		return peers.Dial(addr, peers.Options{MaxMessageBytes: 64 << 20, Unary: unary})
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
		_ = nb.Subscribe(ctx, &fanoutv1.SubscribeRequest{}, func(*frame.Frame) error {
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

// BenchmarkPipeline measures events/s from a Submit's bytes (Node.submitFrame, what the
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
					f := new(frame.Frame)
					for i := 0; i < b.N; i += perReq {
						k := min(perReq, b.N-i)
						for range k {
							window <- struct{}{}
						}
						f.B = appendSubmitRequest(f.B[:0], i, k, payload)
						if _, err := na.submitFrame(context.Background(), f); err != nil {
							panic(err)
						}
						if got := na.submitted[subAccepted].Load(); got != uint64(i+k) {
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
			f := new(frame.Frame)
			for i := range b.N {
				f.B = appendSubmitRequest(f.B[:0], i, 1, payload)
				if _, err := na.submitFrame(context.Background(), f); err != nil {
					b.Fatal(err)
				}
				<-got
			}
		})
	}
}
