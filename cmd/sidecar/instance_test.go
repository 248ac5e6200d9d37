package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/fanout"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestInstanceWiring starts a real instance with the app listener on a unix socket and
// checks what the wiring promises: GetStatus and health over the socket, /metrics with
// the fanout and gRPC series, /healthz, and NOT_SERVING once shutdown begins.
func TestInstanceWiring(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "fanout.sock")
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminAddr := admin.Addr().String()
	admin.Close()
	cfg := fanout.DefaultConfig()
	cfg.NodeID = "wired"
	cfg.Peers = []string{"127.0.0.1:1"} // unreachable: the peer shows up in status and metrics
	inst, err := startInstance(instanceConfig{
		appAddr: "unix://" + sock, peerAddr: "127.0.0.1:0", adminAddr: adminAddr,
		node: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
	for path, want := range map[string]string{
		"/metrics": `fanout_peer_events_total{kind="accepted",peer="127.0.0.1:1"}`,
		"/healthz": "ok",
	} {
		body := httpGet(t, "http://"+adminAddr+path)
		if !strings.Contains(body, want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}
	if body := httpGet(t, "http://"+adminAddr+"/metrics"); !strings.Contains(body, "grpc_server_handled_total") {
		t.Error("/metrics lacks the gRPC server metrics")
	}

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
