package sidecar

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/natstest"
	"github.com/fanout/fanout/internal/testpki"
	"github.com/nats-io/nkeys"
)

// TestJetStreamCreds: against a real 3-server cluster in operator (JWT) mode, two
// sidecars with credentials files of the bucket's account (Config.NATS.CredsFile,
// --nats-creds) turn ready and an event one accepts reaches the other; a sidecar
// with the credentials of an account the servers do not know starts, is not ready,
// and its readiness reason says the server refused its authorization.
func TestJetStreamCreds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nats-server")
	}
	bin, err := natstest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := natstest.DefaultConfig()
	cfg.Binary, cfg.Operator = bin, true
	c := natstest.Start(t, cfg)

	start := func(id, creds string) *Sidecar {
		t.Helper()
		sc := testConfig(id, new(strings.Builder))
		sc.Transport, sc.JetStream.Replicas = TransportJetStream, 3
		sc.NATS = NATSConfig{URLs: c.URLs(), CredsFile: creds}
		s, err := Start(context.Background(), sc)
		if err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
		t.Cleanup(func() { s.Shutdown(context.Background()) }) //nolint:errcheck // the test's checks come first
		return s
	}
	a, b := start("creds-a", c.Creds(natstest.AccountApp)), start("creds-b", c.Creds(natstest.AccountApp))
	for _, s := range []*Sidecar{a, b} {
		select {
		case <-s.Node().Ready():
		case <-time.After(60 * time.Second):
			_, reason := s.Node().Readiness()
			t.Fatalf("%s not ready after 60s with good credentials: %s", s.Node().ID(), reason)
		}
	}
	cc, err := dialApp(a.AppAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := fanoutv1.NewFanoutServiceClient(cc).Submit(ctx, &fanoutv1.SubmitRequest{
		Events: []*fanoutv1.Event{{TaskId: "creds/1", Payload: []byte("x")}}, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM})
	if err != nil {
		t.Fatalf("Submit with credentials: %v", err)
	}
	if res := resp.GetResults(); !resp.GetSatisfied() || len(res) != 1 || res[0].GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
		t.Fatalf("Submit: %v, want the one event acknowledged", resp)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, err := b.Node().Get(&fanoutv1.GetRequest{TaskIds: []string{"creds/1"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.GetEntries()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("creds-b did not get creds/1 within 30s of its acknowledgement")
		}
		time.Sleep(20 * time.Millisecond)
	}

	bad := start("creds-bad", c.Creds(natstest.AccountUnknown))
	var reason string
	for deadline := time.Now().Add(30 * time.Second); ; {
		var ready bool
		ready, reason = bad.Node().Readiness()
		if ready {
			t.Fatalf("a sidecar with an unknown account's credentials is ready: %s", reason)
		}
		if strings.Contains(strings.ToLower(reason), "authorization violation") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness reason with an unknown account's credentials = %q, want it to say authorization violation", reason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("refused: %s", reason)
}

// TestCheckCreds: a credentials file is checked at start: its JWT and seed blocks,
// and that they are the same user's.
func TestCheckCreds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The blocks of a credentials file, as jwt.FormatUserConfig writes them, with a
	// JWT of subject sub (checkCreds reads its subject; the server checks the rest).
	creds := func(token, seed string) string {
		return "-----BEGIN NATS USER JWT-----\n" + token + "\n------END NATS USER JWT------\n\n" +
			"-----BEGIN USER NKEY SEED-----\n" + seed + "\n------END USER NKEY SEED------\n"
	}
	token := func(sub string) string {
		return "eyJhbGciOiJlZDI1NTE5LW5rZXkifQ." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"`+sub+`"}`)) + ".c2ln"
	}
	user := func() (seed, pub string) {
		kp := testpki.Must(nkeys.CreateUser())
		return string(testpki.Must(kp.Seed())), testpki.Must(kp.PublicKey())
	}
	seed, pub := user()
	_, otherPub := user()
	if err := checkCreds(write("good", creds(token(pub), seed))); err != nil {
		t.Errorf("good: checkCreds = %v", err)
	}
	for _, tc := range []struct{ name, content, want string }{
		{"empty", "", "holds no user JWT block"},
		{"a seed alone", seed + "\n", "holds no user JWT block"},
		{"not a JWT", creds("garbled", seed), "user JWT: not a JWT"},
		{"no subject", creds(token(""), seed), "user JWT: no subject"},
		{"no seed", strings.SplitAfter(creds(token(pub), seed), "------END NATS USER JWT------\n")[0], "user NKey seed: "},
		{"a bad seed", creds(token(pub), seed[:len(seed)-2]+"AA"), "user NKey seed: "},
		{"two users' halves", creds(token(otherPub), seed), "the user JWT is of " + otherPub + ", the seed of " + pub},
	} {
		err := checkCreds(write(tc.name, tc.content))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: checkCreds = %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := checkCreds(filepath.Join(dir, "missing")); err == nil || !os.IsNotExist(err) {
		t.Errorf("missing: checkCreds = %v, want not exist", err)
	}
}
