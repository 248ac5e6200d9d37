package sidecar

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// TestJetStreamOpensNoPeerListener: on the JetStream transport the sidecar opens no
// peer listener (a given one is closed), starts although NATS is unreachable (the
// node is not ready and says so), and shuts down with its connection and the
// transport's goroutines gone (TestMain's leak check).
func TestJetStreamOpensNoPeerListener(t *testing.T) {
	given, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	cfg := testConfig("js", &log)
	cfg.Transport, cfg.NATS.URLs, cfg.PeerListener = TransportJetStream, []string{"nats://127.0.0.1:1"}, given
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.PeerAddr() != "" || s.Mesh() != nil {
		t.Errorf("PeerAddr %q, Mesh %v: want none on the JetStream transport", s.PeerAddr(), s.Mesh())
	}
	if c, err := net.DialTimeout("tcp", given.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Errorf("the given peer listener %s still accepts", given.Addr())
	}
	if ready, reason := s.Node().Readiness(); ready || reason == "" {
		t.Errorf("Readiness with NATS unreachable = %v, %q; want not ready, with a reason", ready, reason)
	}
	if rows := s.Node().Status().GetPeers(); len(rows) != 1 || rows[0].GetAddress() != "KV_fanout" {
		t.Errorf("status peers = %v, want the stream's one row", rows)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if !strings.Contains(log.String(), `"transport":"jetstream"`) {
		t.Errorf("the start-up line does not name the transport:\n%s", log.String())
	}
}

// TestJetStreamRefusesPeers: peers, peer DNS and peer TLS are the mesh's; on the
// JetStream transport each is refused, naming the transport, and so is a missing
// NATS URL.
func TestJetStreamRefusesPeers(t *testing.T) {
	cfg := testConfig("js", new(strings.Builder))
	cfg.Transport = TransportJetStream
	cfg.Mesh.Peers = []string{"127.0.0.1:7071"}
	cfg.Discovery.PeersDNS = "peers.test:7071"
	cfg.PeerTLS.CA = "ca.pem"
	_, err := Start(context.Background(), cfg)
	if err == nil {
		t.Fatal("Start accepted peers on the JetStream transport")
	}
	for _, want := range []string{
		"sidecar.Config.Mesh.Peers: not used with sidecar.Config.Transport=jetstream",
		"sidecar.Config.Discovery.PeersDNS: not used with sidecar.Config.Transport=jetstream",
		"sidecar.Config.PeerTLS: not used with sidecar.Config.Transport=jetstream",
		"sidecar.Config.NATS.URLs: empty with sidecar.Config.Transport=jetstream",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start = %q, want %q in it", err, want)
		}
	}
}
