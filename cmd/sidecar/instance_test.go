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
	"github.com/fanout/fanout/pkg/sidecar"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestInstanceWiring starts a real sidecar (pkg/sidecar) with the app listener on a
// unix socket and checks what the wiring promises, through the client commands' code:
// GetStatus and health over the socket, `sidecar status`'s table, /metrics with the
// fanout and gRPC series, /healthz, and NOT_SERVING once shutdown begins.
func TestInstanceWiring(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fanout.sock")
	ports, err := freeport.Take(2)
	if err != nil {
		t.Fatal(err)
	}
	defer ports.Release()
	adminAddr, pprofAddr := ports.Addrs()[0], ports.Addrs()[1]
	cfg := sidecar.DefaultConfig()
	cfg.Node = fanout.DefaultConfig()
	cfg.Node.NodeID = "wired"
	cfg.Mesh.Peers = []string{"127.0.0.1:1"} // unreachable: the peer shows up in status and metrics
	cfg.AppAddr, cfg.PeerAddr, cfg.AdminAddr, cfg.PprofAddr = "unix://"+sock, "127.0.0.1:0", adminAddr, pprofAddr
	cfg.Build = sidecarBuild()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	sc, err := sidecar.Start(context.Background(), cfg)
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
	if err := sc.Shutdown(sctx); err != nil {
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
	for _, svc := range []string{"", sidecar.ReadinessService, sidecar.PeerService} {
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
