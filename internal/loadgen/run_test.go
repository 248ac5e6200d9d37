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
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/grpcapi"
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
		cfg.Batcher.Workers = 2
		cfg.Dial = func(addr string) (fanout.Replicator, error) { return fake.Dial(addr), nil }
		for _, o := range ids {
			if o != id {
				cfg.Peers = append(cfg.Peers, o)
			}
		}
		node, err := fanout.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		fake.Handle(id, grpcapi.NewPeerServer(node).Replicate)
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
