package sidecar

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/internal/natstest"
	"github.com/fanout/fanout/internal/testpki"
	"github.com/nats-io/nkeys"
)

// TestJetStreamNKeyAndTLS: a sidecar reaches a real NATS server (the pinned one) that
// requires TLS with a client certificate and an NKey user, with --nats-tls-ca,
// --nats-tls-cert, --nats-tls-key and --nats-nkey: it turns ready (the stream is
// opened, the feed caught up) and a QUORUM Submit is acknowledged by the stream.
func TestJetStreamNKeyAndTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server")
	}
	bin, err := natstest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ca := testpki.Must(testpki.NewCA("nats-ca"))
	server := testpki.Must(ca.Write(t.TempDir(), testpki.Leaf{DNSNames: []string{"localhost"}}, ca))
	client := testpki.Must(ca.Write(t.TempDir(), testpki.Leaf{DNSNames: []string{"client.fanout.test"}}, ca))
	user := testpki.Must(nkeys.CreateUser())
	seed, pub := testpki.Must(user.Seed()), testpki.Must(user.PublicKey())
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	port := startAuthNATS(t, bin, dir, server, pub)

	cfg := testConfig("js-auth", new(strings.Builder))
	cfg.Transport, cfg.JetStream.Replicas = TransportJetStream, 1
	cfg.NATS = NATSConfig{URLs: []string{fmt.Sprintf("nats://localhost:%d", port)}, NKeyFile: seedFile}
	cfg.NATS.TLS.CA, cfg.NATS.TLS.Cert, cfg.NATS.TLS.Key = client.CA, client.Cert, client.Key
	s, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background()) //nolint:errcheck // the test's checks come first
	select {
	case <-s.Node().Ready():
	case <-time.After(30 * time.Second):
		_, reason := s.Node().Readiness()
		t.Fatalf("not ready after 30s over TLS with an NKey: %s\nserver log:\n%s", reason, readFile(filepath.Join(dir, "nats.log")))
	}
	cc, err := dialApp(s.AppAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := fanoutv1.NewFanoutServiceClient(cc).Submit(ctx, &fanoutv1.SubmitRequest{
		Events: []*fanoutv1.Event{{TaskId: "auth/1", Payload: []byte("x")}}, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM})
	if err != nil {
		t.Fatalf("Submit over TLS with an NKey: %v", err)
	}
	if res := resp.GetResults(); !resp.GetSatisfied() || len(res) != 1 || res[0].GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
		t.Fatalf("Submit: %v, want the one event acknowledged", resp)
	}
}

// startAuthNATS runs one nats-server with JetStream in dir that requires TLS (a
// client certificate of tls's CA) and the NKey user pub, until the test ends; it
// returns its client port.
func startAuthNATS(t *testing.T, bin, dir string, tls testpki.Files, pub string) int {
	t.Helper()
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ports.Release)
	port := ports.Ports()[0]
	conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
jetstream { store_dir: %q }
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }
authorization { users: [ { nkey: %q } ] }
`, port, filepath.Join(dir, "store"), tls.Cert, tls.Key, tls.CA, pub)
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close() // the child has its own descriptor
	cmd := exec.Command(bin, "-c", confPath)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill() //nolint:errcheck // fails only if it has exited
		cmd.Wait()         //nolint:errcheck // killed
	})
	return port
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
