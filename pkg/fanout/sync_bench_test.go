package fanout

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// BenchmarkAntiEntropyRound times one anti-entropy round between two nodes that hold
// 1M keys each (~100-byte payloads), over real gRPC on loopback TCP: in sync, and with
// 10,000 keys newer on the serving side (pulled) each round. It reports the round's
// bytes on the wire (protobuf sizes, both directions), the process's CPU per round
// (both nodes: they share the process) and the keys repaired. docs/BENCHMARKS.md.
//
//	go test ./pkg/fanout -run '^$' -bench AntiEntropyRound -benchtime 5x -count 3
func BenchmarkAntiEntropyRound(b *testing.B) {
	const keys, differ = 1_000_000, 10_000
	a, srv := benchSyncNode(b, "a"), benchSyncNode(b, "b")
	payload := make([]byte, 100)
	fill := func(n *Node, origin string, from, to int, version uint64) {
		now := time.Now()
		for i := from; i < to; i++ {
			raw, _ := proto.Marshal(&fanoutv1.Event{TaskId: "key/" + strconv.Itoa(i), Version: version, Payload: payload})
			off := wire.TaskIDOffset(raw)
			id := raw[off : off+len("key/")+len(strconv.Itoa(i))]
			r := n.table.Put(&state.Write{Key: id, KeyOffset: off, Raw: raw,
				Stamp: state.Stamp{Version: version, Origin: origin}, Submitted: now.UnixNano()}, now)
			if r.Outcome != state.Applied {
				b.Fatalf("fill %s: %v", id, r)
			}
		}
	}
	base := wallVersion(time.Now().Add(-time.Hour))
	fill(a, "c", 0, keys, base)
	fill(srv, "c", 0, keys, base)
	addr := serveSyncNode(b, srv)
	conn, err := peers.Dial(addr, peers.Options{MaxMessageBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	round := func() (time.Duration, int64, int) {
		r, err := a.syncer.Round(ctx, conn, nil)
		if err != nil {
			b.Fatal(err)
		}
		return r.Duration, int64(r.Bytes), r.Pulled + r.Pushed
	}
	b.Run("1M-in-sync", func(b *testing.B) {
		var bytes int64
		cpu0 := cpuTime()
		for b.Loop() {
			_, n, repaired := round()
			if repaired != 0 {
				b.Fatalf("in sync, yet %d keys repaired", repaired)
			}
			bytes += n
		}
		b.ReportMetric(float64(bytes)/float64(b.N), "wire-bytes/round")
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/round")
	})
	b.Run("1M-10k-differ", func(b *testing.B) {
		var bytes int64
		var cpu time.Duration
		v := base
		for b.Loop() {
			b.StopTimer()
			v = max(v+1, wallVersion(time.Now()))
			fill(srv, "c", 0, differ, v) // the first 10,000 keys, newer on the server
			b.StartTimer()
			cpu0 := cpuTime()
			_, n, repaired := round()
			cpu += cpuTime() - cpu0
			if repaired != differ {
				b.Fatalf("%d keys repaired, want %d", repaired, differ)
			}
			bytes += n
		}
		b.ReportMetric(float64(bytes)/float64(b.N), "wire-bytes/round")
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/round")
	})
}

// benchSyncNode is a node with no peers (so no bootstrap and no rounds of its own)
// and room for the benchmark's keys.
func benchSyncNode(b *testing.B, id string) *Node {
	cfg := testConfig(id)
	cfg.State.MaxKeys = 2_000_000
	cfg.State.MaxBytes = 1 << 30
	cfg.SyncMessageBytes = 4 << 20
	n, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(n.Close)
	return n
}

// syncServer serves a node's anti-entropy calls over gRPC for the benchmark. The
// node's package cannot import its gRPC edge (pkg/grpcapi imports it): this serves the
// three calls the round makes and maps no errors (the benchmark fails on any).
type syncServer struct {
	fanoutv1.UnimplementedPeerServiceServer
	n *Node
}

func (s syncServer) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	return s.n.Digest(req)
}

func (s syncServer) Pull(req *fanoutv1.PullRequest, stream fanoutv1.PeerService_PullServer) error {
	return s.n.Pull(req, stream.Send)
}

func (s syncServer) Push(_ context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	return s.n.Push(Caller{}, req)
}

// serveSyncNode serves n's anti-entropy calls (syncServer) on a loopback TCP port.
func serveSyncNode(b *testing.B, n *Node) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}, frame.ServerOptions()...)...)
	fanoutv1.RegisterPeerServiceServer(srv, syncServer{n: n})
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// cpuTime is the process's user + system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
