package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/mesh"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestInstanceWiring starts a real instance with the app listener on a unix socket and
// checks what the wiring promises: GetStatus and health over the socket, /metrics with
// the fanout and gRPC series, /healthz, and NOT_SERVING once shutdown begins.
func TestInstanceWiring(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fanout.sock")
	ports, err := freeport.Take(2)
	if err != nil {
		t.Fatal(err)
	}
	defer ports.Release()
	adminAddr, pprofAddr := ports.Addrs()[0], ports.Addrs()[1]
	cfg := fanout.DefaultConfig()
	cfg.NodeID = "wired"
	mc := mesh.DefaultConfig()
	mc.Peers = []string{"127.0.0.1:1"} // unreachable: the peer shows up in status and metrics
	inst, err := startInstance(instanceConfig{
		appAddr: "unix://" + sock, peerAddr: "127.0.0.1:0", adminAddr: adminAddr, pprofAddr: pprofAddr,
		node: cfg, mesh: mc, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := fetchStatus(ctx, appOptions{addr: "unix://" + sock})
	if err != nil || st.GetNodeId() != "wired" || len(st.GetPeers()) != 1 {
		t.Fatalf("GetStatus over the unix socket: %v, %v", st, err)
	}
	var table strings.Builder
	printStatus(&table, st)
	for _, want := range []string{"ready ", "PENDING", "127.0.0.1:1"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("sidecar status output lacks %q:\n%s", want, table.String())
		}
	}
	for path, want := range map[string]string{
		"/metrics":  `fanout_peer_events_total{kind="accepted",peer="127.0.0.1:1",peer_id=""}`,
		"/metrics#": `fanout_build_info{goversion="go`,
		"/healthz":  "ok",
	} {
		body := httpGet(t, "http://"+adminAddr+strings.TrimSuffix(path, "#"))
		if !strings.Contains(body, want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}
	if body := httpGet(t, "http://"+adminAddr+"/metrics"); !strings.Contains(body, "grpc_server_handled_total") {
		t.Error("/metrics lacks the gRPC server metrics")
	}
	checkAdminSplit(t, adminAddr, pprofAddr)

	cc, err := dialApp("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	health := healthpb.NewHealthClient(cc)
	if r, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before shutdown: %v %v", r, err)
	}
	// Shut down with an unreachable peer holding nothing: drain is immediate.
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := inst.shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := fanoutv1.NewFanoutServiceClient(cc).GetStatus(ctx, &fanoutv1.GetStatusRequest{}); err == nil {
		t.Fatal("the app listener still answers after shutdown")
	}
}

// checkAdminSplit: the admin address serves readiness over HTTP and gRPC health
// (cleartext HTTP/2, as the kubelet's gRPC probes speak it) for every named service,
// and no profiles; those are on the pprof address only.
func checkAdminSplit(t *testing.T, adminAddr, pprofAddr string) {
	t.Helper()
	// Ready once the bootstrap gave up on the unreachable peer (~2 s); until then
	// 503 with the reason.
	var code int
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if code = resp.StatusCode; code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "syncing") {
			t.Fatalf("/readyz while bootstrapping: %d %q, want 503 with the reason", code, body)
		}
	}
	if code != http.StatusOK || !strings.Contains(string(body), "ready") {
		t.Errorf("/readyz: %d %q, want 200 with the reason", code, body)
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
		r, err := http.Get("http://" + adminAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("admin %s: %d, want 404 (profiles are on --pprof-addr only)", path, r.StatusCode)
		}
	}
	if body := httpGet(t, "http://"+pprofAddr+"/debug/pprof/"); !strings.Contains(body, "goroutine") {
		t.Errorf("--pprof-addr /debug/pprof/ lacks the profiles: %q", body)
	}
	cc, err := grpc.NewClient(adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := healthpb.NewHealthClient(cc)
	for _, svc := range []string{"", readinessService, peerService} {
		r, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %q on the admin address: %v %v, want SERVING", svc, r, err)
		}
	}
	if _, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("gRPC health of an unknown service: %v, want NotFound", err)
	}
	// The admin address serves health only: the API is not there.
	if _, err := fanoutv1.NewFanoutServiceClient(cc).GetStatus(ctx, &fanoutv1.GetStatusRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("GetStatus on the admin address: %v, want Unimplemented", err)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestInstanceDataDir: an instance on --data-dir keeps its keys and its node id across
// a restart, refuses an explicit other node id, lets a second instance know the dir is
// taken, and logs the drain's counts.
func TestInstanceDataDir(t *testing.T) {
	dir := t.TempDir()
	start := func(id string, given bool, logTo io.Writer) (*instance, error) {
		cfg := fanout.DefaultConfig()
		cfg.NodeID = id
		return startInstance(instanceConfig{appAddr: "127.0.0.1:0", peerAddr: "127.0.0.1:0", node: cfg, mesh: mesh.DefaultConfig(),
			log: slog.New(slog.NewJSONHandler(logTo, nil)), dataDir: dir, nodeIDGiven: given})
	}
	var log1 strings.Builder
	inst, err := start("first", true, &log1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc, err := dialApp(inst.appAddr)
	if err != nil {
		t.Fatal(err)
	}
	app := fanoutv1.NewFanoutServiceClient(cc)
	if _, err := app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Payload: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	if _, err := start("other", true, io.Discard); err == nil || !strings.Contains(err.Error(), "in use by another sidecar") {
		t.Fatalf("a second instance on the same --data-dir: %v; want it refused as in use", err)
	}
	if err := inst.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log1.String(), `"msg":"drained: every queued event was sent","sent":0,"kept":0,"dropped":0,"peers":0,"keys":1,"data_dir":true`) {
		t.Fatalf("drain log line missing or wrong:\n%s", log1.String())
	}

	if _, err := start("other", true, io.Discard); err == nil || !strings.Contains(err.Error(), `belongs to node "first"`) {
		t.Fatalf("restart with another explicit --node-id: %v; want it refused naming the saved id", err)
	}
	inst, err = start("hostname", false, io.Discard) // no --node-id: the saved one
	if err != nil {
		t.Fatal(err)
	}
	defer inst.shutdown(ctx)
	cc, err = dialApp(inst.appAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := fanoutv1.NewFanoutServiceClient(cc).Get(ctx, &fanoutv1.GetRequest{TaskIds: []string{"k"}})
	if err != nil || len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetOriginNode() != "first" || inst.node.ID() != "first" {
		t.Fatalf("after the restart: %v %v, node id %s; want k from first, and the node id first", resp, err, inst.node.ID())
	}
}

// TestStreamsPerConnection: one client connection holds at most maxStreamsPerConn
// calls at once; the next waits (its deadline ends it) until one of them ends, and the
// connection and its open calls are unharmed.
func TestStreamsPerConnection(t *testing.T) {
	cfg := fanout.DefaultConfig()
	cfg.NodeID = "streams"
	inst, err := startInstance(instanceConfig{
		appAddr: "127.0.0.1:0", peerAddr: "127.0.0.1:0", node: cfg, mesh: mesh.DefaultConfig(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		inst.shutdown(ctx) //nolint:errcheck // the test is over
	}()
	cc, err := dialApp(inst.appAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := fanoutv1.NewFanoutServiceClient(cc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := func(ctx context.Context) (fanoutv1.FanoutService_SubscribeClient, error) {
		s, err := client.Subscribe(ctx, &fanoutv1.SubscribeRequest{TaskIdPrefix: "w/", Snapshot: true})
		if err == nil {
			_, err = s.Recv() // the snapshot's end: the call is open on the server
		}
		return s, err
	}
	cancels := make([]context.CancelFunc, maxStreamsPerConn)
	for i := range maxStreamsPerConn {
		sctx, scancel := context.WithCancel(ctx)
		cancels[i] = scancel
		if _, err := watch(sctx); err != nil {
			t.Fatalf("watch %d of %d: %v", i+1, maxStreamsPerConn, err)
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := watch(short); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("watch %d: %v, want DeadlineExceeded (waiting for a free stream)", maxStreamsPerConn+1, err)
	}
	cancels[0]() // one ends: the next call gets its stream
	later, cancelLater := context.WithTimeout(ctx, 5*time.Second)
	defer cancelLater()
	if _, err := watch(later); err != nil {
		t.Fatalf("watch after one ended: %v", err)
	}
	cancels[1]() // a unary call needs a stream too
	if _, err := client.GetStatus(later, &fanoutv1.GetStatusRequest{}); err != nil {
		t.Fatalf("GetStatus once a stream is free: %v", err)
	}
}
