package sidecar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/dnstest"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/fanout"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Every test stops what it started: the sidecar's servers, readiness publishing and
// discovery's refresh are gone once Shutdown returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testConfig is a sidecar on loopback ports of its own, without the admin listener,
// logging to logTo, with the node's own defaults (fanout.DefaultConfig).
func testConfig(id string, logTo io.Writer) Config {
	cfg := DefaultConfig()
	cfg.Node = fanout.DefaultConfig()
	cfg.Node.NodeID = id
	cfg.AppAddr, cfg.PeerAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Logger = slog.New(slog.NewJSONHandler(logTo, nil))
	return cfg
}

// dialApp connects to a sidecar's app listener.
func dialApp(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// TestShutdown: Run returns nil once its context is done, having shut the sidecar
// down; a later Shutdown does nothing more and returns the same result; the app
// listener no longer answers.
func TestShutdown(t *testing.T) {
	var log strings.Builder
	s, err := Start(context.Background(), testConfig("stops", &log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run after its context is done: %v", err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after Run: %v", err)
	}
	for _, msg := range []string{`"msg":"signal received; draining"`, `"msg":"sidecar stopped"`} {
		if n := strings.Count(log.String(), msg); n != 1 {
			t.Errorf("the log has %d %s, want 1:\n%s", n, msg, log.String())
		}
	}
	if c, err := net.DialTimeout("tcp", s.AppAddr(), time.Second); err == nil {
		c.Close()
		t.Errorf("the app listener %s still accepts after Shutdown", s.AppAddr())
	}
}

// TestStartFails: a start that fails at any step closes what it opened, the listeners
// it was given included, stops what it started (TestMain: no goroutine is left), and
// names the Config field to blame.
func TestStartFails(t *testing.T) {
	occupied, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer occupied.Close()
	taken := occupied.Addr().String()
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		field string
	}{
		{"invalid", func(c *Config) { c.Discovery.DNSServer = "10.0.0.1" }, "sidecar.Config.Discovery.DNSServer"},
		{"the node refuses its config", func(c *Config) { c.Node.NodeID = "" }, "fanout.Config.NodeID"},
		{"the token file is missing", func(c *Config) { c.AppTokenFile = "/nonexistent/token" }, "sidecar.Config.AppTokenFile"},
		{"the admin address is taken (the servers run already)", func(c *Config) { c.AdminAddr = taken }, "sidecar.Config.AdminAddr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var given [2]net.Listener
			for i := range given {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				given[i] = l
			}
			cfg := testConfig("fails", io.Discard)
			cfg.AppListener, cfg.PeerListener = given[0], given[1]
			tc.set(&cfg)
			_, err := Start(context.Background(), cfg)
			var ce *configerr.Error
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("Start = %v, want a configerr.Error naming %s", err, tc.field)
			}
			for _, l := range given {
				if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("the given listener %s: Accept = %v, want it closed", l.Addr(), err)
				}
			}
		})
	}
}

// TestDiscoveryWatcher: with PeersDNS, the node starts with the peers DNS names (the
// first lookup comes before the node), follows DNS while it runs, exports the
// lookups on /metrics, and Shutdown stops the refresh (TestMain: no goroutine left).
func TestDiscoveryWatcher(t *testing.T) {
	dns := dnstest.Start(t)
	dns.SetHosts(map[string][]string{"peers.fanout.test": {"127.0.0.2"}})
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ports.Release()
	cfg := testConfig("discovers", io.Discard)
	cfg.AdminAddr = ports.Addrs()[0]
	cfg.Discovery.PeersDNS = "peers.fanout.test:7999"
	cfg.Discovery.DNSServer = dns.Addr()
	cfg.Discovery.Refresh = 50 * time.Millisecond
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx) //nolint:errcheck // the test is over
	}()
	if got := peerAddrs(s); strings.Join(got, ",") != "127.0.0.2:7999" {
		t.Fatalf("peers at start: %v, want the one DNS names", got)
	}
	dns.SetHosts(map[string][]string{"peers.fanout.test": {"127.0.0.2", "127.0.0.3"}})
	waitFor(t, 10*time.Second, "the second peer DNS names", func() bool { return len(peerAddrs(s)) == 2 })
	resp, err := http.Get("http://" + cfg.AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "fanout_peers_dns_addresses 2") {
		t.Errorf("/metrics lacks fanout_peers_dns_addresses 2")
	}
}

// peerAddrs are the addresses of s's peers, as GetStatus lists them.
func peerAddrs(s *Sidecar) []string {
	var out []string
	for _, p := range s.Node().Status().GetPeers() {
		out = append(out, p.GetAddress())
	}
	return out
}

// waitFor checks cond every 20 ms until it holds, or fails the test after timeout.
// The peer set changes on the refresh's own schedule, which signals nothing.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no %s within %s", what, timeout)
		}
	}
}

// TestDataDir: a sidecar on a data dir keeps its keys and its node id across a
// restart, refuses an explicit other node id, lets a second sidecar know the dir is
// taken, and logs the drain's counts.
func TestDataDir(t *testing.T) {
	dir := t.TempDir()
	start := func(id string, given bool, logTo io.Writer) (*Sidecar, error) {
		cfg := testConfig(id, logTo)
		cfg.DataDir, cfg.NodeIDGiven = dir, given
		return Start(context.Background(), cfg)
	}
	var log1 strings.Builder
	inst, err := start("first", true, &log1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc, err := dialApp(inst.AppAddr())
	if err != nil {
		t.Fatal(err)
	}
	app := fanoutv1.NewFanoutServiceClient(cc)
	if _, err := app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Payload: []byte("v")}}}); err != nil {
		t.Fatal(err)
	}
	cc.Close()
	if _, err := start("other", true, io.Discard); err == nil || !strings.Contains(err.Error(), "in use by another sidecar") {
		t.Fatalf("a second sidecar on the same data dir: %v; want it refused as in use", err)
	}
	if err := inst.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log1.String(), `"msg":"drained: every queued event was sent","sent":0,"kept":0,"dropped":0,"peers":0,"keys":1,"data_dir":true`) {
		t.Fatalf("drain log line missing or wrong:\n%s", log1.String())
	}

	if _, err := start("other", true, io.Discard); err == nil || !strings.Contains(err.Error(), `belongs to node "first"`) {
		t.Fatalf("restart with another explicit node id: %v; want it refused naming the saved id", err)
	}
	inst, err = start("hostname", false, io.Discard) // no node id given: the saved one
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Shutdown(ctx)
	cc, err = dialApp(inst.AppAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := fanoutv1.NewFanoutServiceClient(cc).Get(ctx, &fanoutv1.GetRequest{TaskIds: []string{"k"}})
	if err != nil || len(resp.GetEntries()) != 1 || resp.GetEntries()[0].GetOriginNode() != "first" || inst.Node().ID() != "first" {
		t.Fatalf("after the restart: %v %v, node id %s; want k from first, and the node id first", resp, err, inst.Node().ID())
	}
}

func TestNodeIDFor(t *testing.T) {
	for _, tc := range []struct {
		name, saved, configured string
		given                   bool
		want, errHas            string
	}{
		{"a new dir takes the configured id", "", "host-1", false, "host-1", ""},
		{"a new dir takes the given id", "", "a", true, "a", ""},
		{"the same id", "a", "a", true, "a", ""},
		{"the saved id wins over a default", "a", "host-2", false, "a", ""},
		{"another given id is refused", "a", "b", true, "", `/d belongs to node "a", not sidecar.Config.Node.NodeID "b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := nodeIDFor("/d", tc.saved, tc.configured, tc.given)
			if tc.errHas != "" {
				var ce *configerr.Error
				if !errors.As(err, &ce) || ce.Field != "sidecar.Config.DataDir" || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("nodeIDFor = %q, %v; want a sidecar.Config.DataDir error containing %q", got, err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("nodeIDFor = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestStreamsPerConnection: one client connection holds at most maxStreamsPerConn
// calls at once; the next waits (its deadline ends it) until one of them ends, and the
// connection and its open calls are unharmed.
func TestStreamsPerConnection(t *testing.T) {
	inst, err := Start(context.Background(), testConfig("streams", io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		inst.Shutdown(ctx) //nolint:errcheck // the test is over
	}()
	cc, err := dialApp(inst.AppAddr())
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

// TestConfigCheckedBeforeAnyOutput: a bad value of the node's or the mesh's
// configuration is refused before Start logs anything (the memory limit's line used
// to come first, then the error).
func TestConfigCheckedBeforeAnyOutput(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"mesh":    func(c *Config) { c.Mesh.Batcher.MaxBatch = 0 },
		"breaker": func(c *Config) { c.Mesh.Breaker.Failures = 0 },
		"node":    func(c *Config) { c.Node.State.MaxKeys = -1 },
		"timeout": func(c *Config) { c.Mesh.ReplicateTimeout = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			var logged bytes.Buffer
			cfg := DefaultConfig()
			cfg.Node.NodeID = "n"
			cfg.AppAddr, cfg.PeerAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", ""
			cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
			set(&cfg)
			sc, err := Start(context.Background(), cfg)
			if err == nil {
				_ = sc.Shutdown(context.Background())
				t.Fatal("Start took a bad configuration")
			}
			if logged.Len() > 0 {
				t.Errorf("Start logged before refusing the configuration (%v):\n%s", err, logged.String())
			}
		})
	}
}
