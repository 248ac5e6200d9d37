package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/natstest"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/grpcapi"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startInProcess runs n fanout nodes in this process, meshed through a fake peer
// network, each serving FanoutService on a loopback TCP port. It returns the app
// addresses; the nodes stop at the end of the test.
func startInProcess(t *testing.T, n int) []string {
	t.Helper()
	fake := peers.NewFakeNetwork()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%d", i)
	}
	addrs := make([]string, n)
	for i, id := range ids {
		cfg := fanout.DefaultConfig()
		cfg.NodeID = id
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		mc := mesh.DefaultConfig()
		mc.Batcher.Workers = 2
		mc.Dial = func(addr string) (mesh.Conn, error) { return fake.Dial(addr), nil }
		mc.EventBytes, mc.MaxEventBytes, mc.MaxTaskIDBytes = cfg.Limits.EventBytes(), cfg.Limits.MaxEventBytes, cfg.Limits.MaxTaskIDBytes
		mc.Logger = cfg.Logger
		for _, o := range ids {
			if o != id {
				mc.Peers = append(mc.Peers, o)
			}
		}
		var m *mesh.Mesh
		cfg.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
			var err error
			m, err = mesh.New(mc, n)
			if err != nil {
				return nil, err
			}
			return m, nil
		}
		node, err := fanout.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fake.Handle(id, grpcapi.NewPeerServer(node, m).Replicate)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(frame.ServerOption()) // Subscribe sends frames
		grpcapi.RegisterFanoutServer(srv, grpcapi.NewFanoutServer(node))
		served := make(chan struct{})
		go func() { defer close(served); srv.Serve(lis) }()
		t.Cleanup(func() { node.Close(); srv.Stop(); <-served })
		addrs[i] = lis.Addr().String()
	}
	return addrs
}

// quick is a short run: enough events for percentiles, short enough for CI with -race.
func quick() Config {
	c := DefaultConfig()
	c.Duration, c.Warmup, c.Rate, c.Interval = time.Second, 200*time.Millisecond, 2000, 250*time.Millisecond
	c.DrainTimeout = 5 * time.Second
	return c
}

func checkDelivered(t *testing.T, r *Result) {
	t.Helper()
	if r.Submitted == 0 || r.Delivered == 0 || r.Interrupted {
		t.Fatalf("submitted %d delivered %d interrupted %v", r.Submitted, r.Delivered, r.Interrupted)
	}
	if len(r.SubscriberResults) != r.Subscribers || r.Subscribers != r.Nodes-1 {
		t.Fatalf("%d subscriber results for %d subscribers on %d nodes", len(r.SubscriberResults), r.Subscribers, r.Nodes)
	}
	for _, s := range r.SubscriberResults {
		if s.Delivered == 0 || s.Latency.P50 <= 0 {
			t.Errorf("subscriber on %s (%s): delivered %d, p50 %d µs", s.Addr, s.NodeID, s.Delivered, s.Latency.P50)
		}
	}
	if r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P999 {
		t.Errorf("percentiles out of order: %+v", r.Latency)
	}
}

func TestRunAgainstRunningNodes(t *testing.T) {
	cfg := quick()
	cfg.Spawn, cfg.AppAddrs = 0, startInProcess(t, 3)
	var live bytes.Buffer
	cfg.Live = &live
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, r)
	// Unique keys, nothing coalesces, and every measured event reaches both subscribers.
	if r.Overridden != 0 || r.Delivered != 2*r.Submitted {
		t.Errorf("overridden %d, delivered %d for %d submitted: want 0 and 2×", r.Overridden, r.Delivered, r.Submitted)
	}
	if r.NodeCPUSeconds != 0 || r.Converged != nil || r.Spawned {
		t.Errorf("not spawned, no hot keys: %+v", r)
	}
	if !strings.Contains(live.String(), "warmup") || !strings.Contains(live.String(), "pending") {
		t.Errorf("live lines:\n%s", live.String())
	}
	t.Logf("in-process: %d submitted, %d delivered, p50 %d µs p99 %d µs", r.Submitted, r.Delivered, r.P50, r.P99)
}

// A paced run is open loop, stamps each request with its actual send time and its
// due time, and loses nothing at a rate the nodes carry.
func TestRunPacedReportsBothLatencies(t *testing.T) {
	cfg := quick()
	cfg.Spawn, cfg.AppAddrs = 0, startInProcess(t, 3)
	cfg.Batch, cfg.Pipeline = 1, 1 // a pipeline of 1 would throttle a closed loop
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, r)
	if r.Lost == nil || *r.Lost != 0 {
		t.Fatalf("lost %v, want 0", r.Lost)
	}
	if r.SubmitPerSec < 0.9*float64(cfg.Rate) {
		t.Errorf("submitted %.0f/s of %d offered: the pacer waited for responses?", r.SubmitPerSec, cfg.Rate)
	}
	// The due time is never after the send, so latency from it is never smaller.
	if r.LatencyFromDue.P50 < r.P50 || r.LatencyFromDue.Max < r.Max || r.SendLag.Max <= 0 {
		t.Errorf("from send %+v, from due %+v, send lag %+v", r.Latency, r.LatencyFromDue, r.SendLag)
	}
}

// A saturated run with a window keeps at most that many events outstanding and loses
// none.
func TestRunSaturatedWithWindow(t *testing.T) {
	cfg := quick()
	cfg.Spawn, cfg.AppAddrs = 0, startInProcess(t, 3)
	cfg.Rate, cfg.Window, cfg.Duration = 0, 500, 500*time.Millisecond
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, r)
	if r.Lost == nil || *r.Lost != 0 || r.Dropped != 0 || r.WindowStalls != 0 || r.Window != 500 {
		t.Fatalf("lost %v, dropped %d, stalls %d, window %d", r.Lost, r.Dropped, r.WindowStalls, r.Window)
	}
	if r.LatencyFromDue != r.Latency {
		t.Errorf("unpaced: latency from due %+v != from send %+v", r.LatencyFromDue, r.Latency)
	}
}

// --client publisher: one Go client Put per event through its asynchronous
// Publisher. Saturated with a window it loses nothing and every accepted event reaches
// both subscribers; paced with hot keys, the versions the Publisher's results carry
// make the convergence check work as on the stream path.
func TestRunPublisherClient(t *testing.T) {
	addrs := startInProcess(t, 3)
	t.Run("saturated", func(t *testing.T) {
		cfg := quick()
		cfg.Spawn, cfg.AppAddrs, cfg.Client = 0, addrs, ClientPublisher
		cfg.Rate, cfg.Window, cfg.Batch, cfg.Duration = 0, 1000, 1, 500*time.Millisecond
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkDelivered(t, r)
		if r.Client != ClientPublisher || r.Lost == nil || *r.Lost != 0 || r.Delivered != 2*r.Submitted || r.NotAccepted != 0 || r.WindowStalls != 0 {
			t.Fatalf("client %q, lost %v, delivered %d of 2 × %d, not accepted %d, stalls %d", r.Client, r.Lost, r.Delivered, r.Submitted, r.NotAccepted, r.WindowStalls)
		}
	})
	t.Run("paced hot keys", func(t *testing.T) {
		cfg := quick()
		cfg.Spawn, cfg.AppAddrs, cfg.Client = 0, addrs, ClientPublisher
		cfg.Keys, cfg.Batch = 50, 3
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkDelivered(t, r)
		if r.Converged == nil || !*r.Converged {
			t.Fatalf("converged %v", r.Converged)
		}
		if r.SubmitPerSec < 0.9*float64(cfg.Rate) {
			t.Errorf("submitted %.0f/s of %d offered", r.SubmitPerSec, cfg.Rate)
		}
	})
}

func TestRunStopsWhenInterrupted(t *testing.T) {
	cfg := quick()
	cfg.Duration = time.Minute
	cfg.Spawn, cfg.AppAddrs = 0, startInProcess(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || time.Since(start) > 10*time.Second {
		t.Fatalf("interrupted %v after %s", r.Interrupted, time.Since(start))
	}
}

func TestRunFailsOnRefusedSubmit(t *testing.T) {
	cfg := quick()
	cfg.Spawn, cfg.AppAddrs = 0, startInProcess(t, 2)
	// The prefix is a valid Subscribe filter, but the task_ids built on it are over
	// 1024 bytes: the first node refuses the first SubmitRequest.
	cfg.Prefix = strings.Repeat("x", 1020) + "/"
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "publisher 0") || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Fatalf("Run = %v, want the node's refusal", err)
	}
}

// buildSidecar builds cmd/sidecar into a temporary directory.
func buildSidecar(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sidecar")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fanout/fanout/cmd/sidecar").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSpawnHotKeys is `sidecar bench --spawn 3 --keys 50 --json` for about two seconds.
func TestSpawnHotKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar and starts processes")
	}
	cfg := quick()
	cfg.Spawn, cfg.Binary, cfg.Keys = 3, buildSidecar(t), 50
	cfg.ServeFlags = []string{"--shutdown-timeout=2s"}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, r)
	if r.Converged == nil || !*r.Converged || r.ConvergeMs == nil {
		t.Fatalf("converged %v, converge_ms %v", r.Converged, r.ConvergeMs)
	}
	if r.WireEvents == 0 || r.NodeCPUSeconds <= 0 || r.NodePeakRSSBytes <= 0 || r.CPUUsPerDelivered <= 0 || len(r.NodeResults) != 3 {
		t.Fatalf("wire %d, cpu %g s, rss %d, cpu/delivered %g, nodes %d", r.WireEvents, r.NodeCPUSeconds, r.NodePeakRSSBytes, r.CPUUsPerDelivered, len(r.NodeResults))
	}
	for _, n := range r.NodeResults { // a full mesh: to each of 2 peers and from each
		if n.TCPConns == nil || *n.TCPConns != 4 {
			t.Errorf("node %s: tcp connections %v, want 4 (2 peers, both ways)", n.NodeID, n.TCPConns)
		}
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(append(append([]string{}, requiredFields...), spawnFields...), hotKeyFields...) {
		if _, ok := m[f]; !ok {
			t.Errorf("JSON lacks %q: %s", f, buf.String())
		}
	}
	t.Logf("%s", buf.String())
}

// A node that exits at once (a bad serve flag) is reported with its stderr.
func TestSpawnReportsANodeThatFailsToStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar and starts processes")
	}
	cfg := quick()
	cfg.Binary = buildSidecar(t)
	cfg.ServeFlags = []string{"--workers=nope"}
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "workers") {
		t.Fatalf("Run = %v, want the node's exit and its stderr", err)
	}
}

// TestSpawnJetStream is `sidecar bench --spawn 3 --engine-pid ... -- --transport=jetstream
// --nats-url ...` on a real 3-server NATS cluster: the nodes start without peers, each
// holds one connection (to NATS), and the servers' CPU is counted.
func TestSpawnJetStream(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar and nats-server and starts processes")
	}
	bin, err := natstest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.DefaultConfig()
	nc.Binary = bin
	nats := natstest.Start(t, nc)
	cfg := quick()
	cfg.Rate, cfg.Batch = 500, 1
	cfg.Spawn, cfg.Binary = 3, buildSidecar(t)
	cfg.ReadyTimeout = 60 * time.Second // the stream's creation and its leader's election
	cfg.ServeFlags = []string{"--transport=jetstream", "--nats-url=" + strings.Join(nats.URLs(), ","), "--shutdown-timeout=2s"}
	for i := range nc.Servers {
		cfg.EnginePIDs = append(cfg.EnginePIDs, nats.PID(i))
	}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkDelivered(t, r)
	if r.Lost == nil || *r.Lost != 0 || len(r.NodeResults) != 3 || len(r.EngineResults) != 3 || r.EngineCPUSeconds <= 0 {
		t.Fatalf("lost %d, nodes %+v, engine %+v (%g s)", r.Lost, r.NodeResults, r.EngineResults, r.EngineCPUSeconds)
	}
	for _, n := range r.NodeResults {
		if n.TCPConns == nil || *n.TCPConns != 1 {
			t.Errorf("node %s: tcp connections %v, want 1 (its NATS connection)", n.NodeID, n.TCPConns)
		}
	}
	for _, e := range r.EngineResults { // its routes and some sidecars' connections
		if e.TCPConns == nil || *e.TCPConns < 2 || e.PeakRSSBytes <= 0 {
			t.Errorf("engine %s: tcp connections %v, peak rss %d", e.NodeID, e.TCPConns, e.PeakRSSBytes)
		}
	}
}
