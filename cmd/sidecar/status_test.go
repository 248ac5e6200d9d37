package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// statusApp answers GetStatus with st (fakeApp does not implement it).
type statusApp struct {
	fakeApp
	st *fanoutv1.GetStatusResponse
}

func (s *statusApp) GetStatus(context.Context, *fanoutv1.GetStatusRequest) (*fanoutv1.GetStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return s.st, nil
}

func sampleStatus() *fanoutv1.GetStatusResponse {
	now := time.Now()
	return &fanoutv1.GetStatusResponse{
		NodeId: "node-a", Ready: true, ReadyReason: "ready: synced with 2 of 2 peers",
		State:     &fanoutv1.StateStatus{Keys: 12, MaxKeys: 1000000, Revision: 1 << 60},
		Transport: &fanoutv1.TransportStatus{Kind: "mesh", Peers: 3},
		Peers: []*fanoutv1.PeerStatus{
			{Address: "fanout-1.fanout.prod.svc.cluster.local:7071", NodeId: "fanout-1", Breaker: "closed", Up: true,
				UpChangedAt: timestamppb.New(now.Add(-40 * time.Second)),
				LastError: &fanoutv1.PeerError{Class: "network", Message: "connection reset", At: timestamppb.New(now.Add(-45 * time.Second)),
					RecoveredAt: timestamppb.New(now.Add(-40 * time.Second))},
				Accepted: 40, Succeeded: 35, Stale: 2, Overridden: 3, Overflow: 1, Expired: 2, Permanent: 4, Pending: 5,
				Sync: &fanoutv1.SyncStatus{Rounds: 3, LastSuccess: timestamppb.New(now.Add(-12 * time.Second)), LastDuration: durationpb.New(3 * time.Millisecond)}},
			{Address: "10.0.0.3:7071", Breaker: "open", Transient: 9, UpChangedAt: timestamppb.New(now.Add(-3 * time.Second)),
				LastError: &fanoutv1.PeerError{Class: "network", Message: "dial tcp 10.0.0.3:7071: connection refused", At: timestamppb.New(now.Add(-2 * time.Second))}},
			{Address: "10.0.0.4:7071", NodeId: "node-a", Breaker: "closed", Removing: true, Up: true,
				NodeIdConflict: "the peer answers with this node's own id \"node-a\" from another process"},
		},
	}
}

func TestStatusOutputs(t *testing.T) {
	app := &statusApp{st: sampleStatus()}
	addr := serveOn(t, grpc.NewServer(), app)
	ctx := testContext(t)

	table, _, err := runCLI(ctx, []string{"status", "--addr", addr}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node node-a", "ready yes", "transport: mesh   peers 3", "SENT", "DROPPED", "fanout-1.fanout.p…:7071", "network 2s ago", "connection refused",
		"node-a!", "leaving", "node id conflict at 10.0.0.4:7071: the peer answers with this node's own id"} {
		if !strings.Contains(table, want) {
			t.Errorf("status lacks %q:\n%s", want, table)
		}
	}
	// fanout-1: up, sent 37, dropped 1+2+4 = 7, its recovered error left out (in
	// the table and under it); the unknown peer is down since 3s, as its error's
	// age in the table and under it agree.
	if line := lineWith(table, "fanout-1.fanout.p…:7071"); !strings.Contains(line, " yes ") || !strings.Contains(line, " 37 ") ||
		!strings.Contains(line, " 7 ") || strings.Contains(line, "network") {
		t.Errorf("fanout-1's line %q: want up, sent 37, dropped 7, no error (it recovered)", line)
	}
	if strings.Contains(table, "connection reset") {
		t.Errorf("status shows a recovered error:\n%s", table)
	}
	if line := lineWith(table, "10.0.0.3:7071"); !strings.Contains(line, " no 3s ") || !strings.Contains(line, "network 2s ago") {
		t.Errorf("10.0.0.3's line %q: want down for 3s, network 2s ago", line)
	}
	if !strings.Contains(table, "last error to 10.0.0.3:7071 (network, 2s ago)") {
		t.Errorf("the line under the table does not give the table's age:\n%s", table)
	}
	for line := range strings.Lines(table) {
		if strings.HasPrefix(line, "last error") || strings.HasPrefix(line, "node ") {
			continue // the free-text lines
		}
		if n := len([]rune(strings.TrimRight(line, "\n"))); n > 100 {
			t.Errorf("a table line is %d columns, want ≤ 100: %q", n, line)
		}
	}

	wide, _, err := runCLI(ctx, []string{"status", "--addr", addr, "-o", "wide"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OVERRIDDEN", "CONGESTION", "SYNC ROUNDS", "PERMANENT", "fanout-1.fanout.prod.svc.cluster.local:7071", "12s ago",
		"(network, 45s ago; recovered 40s ago): connection reset"} {
		if !strings.Contains(wide, want) {
			t.Errorf("status -o wide lacks %q:\n%s", want, wide)
		}
	}

	for _, args := range [][]string{{"-o", "json"}, {"--json"}} {
		out, _, err := runCLI(ctx, append([]string{"status", "--addr", addr}, args...), "")
		if err != nil {
			t.Fatal(err)
		}
		var got fanoutv1.GetStatusResponse
		if err := protojson.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("status %v is not protojson: %v\n%s", args, err, out)
		}
		if !proto.Equal(&got, app.st) {
			t.Errorf("status %v round-trips to %v, want %v", args, &got, app.st)
		}
		var m struct {
			State struct{ Revision any }
			Peers []map[string]any
		}
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		if m.State.Revision != "1152921504606846976" || len(m.Peers) != 3 || m.Peers[0]["congestion"] != "0" {
			t.Errorf("status %v: want 64-bit numbers as exact strings and zeros present:\n%s", args, out)
		}
	}
	if _, _, err := runCLI(ctx, []string{"status", "--addr", addr, "-o", "yaml"}, ""); err == nil || !strings.Contains(err.Error(), "want table, wide or json") {
		t.Errorf("-o yaml: %v", err)
	}
}

// TestStatusWatch: --watch prints a snapshot every --interval, without escape codes
// when the output is not a terminal, and goes on through a failing GetStatus.
func TestStatusWatch(t *testing.T) {
	app := &statusApp{st: sampleStatus()}
	addr := serveOn(t, grpc.NewServer(), app)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := newLineBuffer()
	done := make(chan error, 1)
	go func() {
		_, err := runCLITo(ctx, out, []string{"status", "--addr", addr, "--watch", "--interval", "50ms"}, "")
		done <- err
	}()
	waitFor := func(what string, cond func(string) bool) {
		t.Helper()
		for !cond(out.String()) {
			if err := out.waitLines(ctx, 1); err != nil {
				t.Fatalf("%s: %v\n%s", what, err, out.String())
			}
		}
	}
	waitFor("two snapshots", func(s string) bool { return strings.Count(s, "node node-a") >= 2 })
	app.mu.Lock()
	app.err = status.Error(codes.Unavailable, "restarting")
	app.mu.Unlock()
	waitFor("the error line", func(s string) bool { return strings.Contains(s, "(retrying)") })
	app.mu.Lock()
	app.err = nil
	app.mu.Unlock()
	n := strings.Count(out.String(), "node node-a")
	waitFor("a snapshot after the error", func(s string) bool { return strings.Count(s, "node node-a") > n })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v", err)
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("watch wrote escape codes to a non-terminal")
	}
	if !strings.Contains(out.String(), "every 50ms: sidecar status --addr "+addr) {
		t.Errorf("no header line:\n%s", out.String())
	}
}

// TestClientToken: the client commands send --token-file's token, and a sidecar's
// refusal says what to pass.
func TestClientToken(t *testing.T) {
	app := &statusApp{st: sampleStatus()}
	srv := grpc.NewServer(grpc.UnaryInterceptor(auth.UnaryServerInterceptor(func(ctx context.Context) (context.Context, error) {
		tok, err := auth.AuthFromMD(ctx, "bearer")
		if err != nil || tok != "s3cret" {
			return nil, status.Error(codes.Unauthenticated, "wrong token")
		}
		return ctx, nil
	})))
	addr := serveOn(t, srv, app)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	_ = os.WriteFile(good, []byte("s3cret\n"), 0o600)
	_ = os.WriteFile(bad, []byte("nope"), 0o600)
	ctx := testContext(t)
	if _, _, err := runCLI(ctx, []string{"status", "--addr", addr, "--token-file", good}, ""); err != nil {
		t.Errorf("status with the token: %v", err)
	}
	if _, _, err := runCLI(ctx, []string{"status", "--addr", addr}, ""); err == nil || !strings.Contains(err.Error(), "pass --token-file") {
		t.Errorf("status without a token: %v, want a hint to pass --token-file", err)
	}
	if _, _, err := runCLI(ctx, []string{"status", "--addr", addr, "--token-file", bad}, ""); err == nil || !strings.Contains(err.Error(), "does not hold this sidecar's token") {
		t.Errorf("status with a wrong token: %v", err)
	}
	t.Setenv("FANOUT_TOKEN_FILE", good)
	if _, _, err := runCLI(ctx, []string{"get", "--addr", addr, "k"}, ""); status.Code(err) == codes.Unauthenticated || (err != nil && strings.Contains(err.Error(), "UNAUTHENTICATED")) {
		t.Errorf("get with FANOUT_TOKEN_FILE: %v", err)
	}
}

// serveOn serves app on srv at a loopback port until the test ends.
func serveOn(t *testing.T, srv *grpc.Server, app fanoutv1.FanoutServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fanoutv1.RegisterFanoutServiceServer(srv, app)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// lineWith is the first line of text that contains substr.
func lineWith(text, substr string) string {
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}

// TestStatusJetStream: a JetStream sidecar's status shows its transport line (the
// stream, bucket, server, feed and outbox), in the table and in -o json.
func TestStatusJetStream(t *testing.T) {
	st := &fanoutv1.GetStatusResponse{
		NodeId: "node-js", Ready: true, ReadyReason: "ready: caught up with stream KV_fanout at start",
		State: &fanoutv1.StateStatus{Keys: 2},
		Peers: []*fanoutv1.PeerStatus{{Address: "KV_fanout", NodeId: "nats://nats-0.nats:4222"}},
		Transport: &fanoutv1.TransportStatus{Kind: "jetstream", Stream: "KV_fanout", Bucket: "fanout", Server: "nats://nats-0.nats:4222",
			ServerVersion: "2.15.2", Replicas: 3, AppliedSequence: 41, LastSequence: 42, Lag: 1, OutboxEvents: 5, OutboxBytes: 640, Reconnects: 2},
	}
	addr := serveOn(t, grpc.NewServer(), &statusApp{st: st})
	ctx := testContext(t)
	table, _, err := runCLI(ctx, []string{"status", "--addr", addr}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"transport: jetstream   stream KV_fanout   bucket fanout   replicas 3   server nats://nats-0.nats:4222 (2.15.2)",
		"applied 41/42   lag 1   outbox 5 events 640 bytes   reconnects 2"} {
		if !strings.Contains(table, want) {
			t.Errorf("status lacks %q:\n%s", want, table)
		}
	}
	st.Transport.Server = ""
	table, _, err = runCLI(ctx, []string{"status", "--addr", addr}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "server not connected") {
		t.Errorf("status of a disconnected sidecar lacks \"server not connected\":\n%s", table)
	}
	out, _, err := runCLI(ctx, []string{"status", "--addr", addr, "-o", "json"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Transport map[string]any
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if m.Transport["kind"] != "jetstream" || m.Transport["bucket"] != "fanout" || m.Transport["lag"] != "1" || m.Transport["replicas"] != float64(3) {
		t.Errorf("status -o json transport = %v, want kind, bucket, lag and replicas:\n%s", m.Transport, out)
	}
}
