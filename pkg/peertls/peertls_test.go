package peertls

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/testpki"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node writes a certificate for id signed by ca, with the bundle, into a new
// directory, and opens a Source on it that reloads every 10ms.
func node(t *testing.T, ca *testpki.CA, l testpki.Leaf, bundle ...*testpki.CA) (*Source, testpki.Files) {
	t.Helper()
	f, err := ca.Write(t.TempDir(), l, bundle...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Config{Files: Files(f), Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, f
}

func dns(id string) testpki.Leaf { return testpki.Leaf{DNSNames: []string{id + ".fanout.prod.svc"}} }

// handshake runs a TLS handshake between a client and a server config over loopback
// TCP and returns the server's error (the one a refused client causes) or the
// client's.
func handshake(t *testing.T, client, server *tls.Config) error {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	srvErr := make(chan error, 1)
	go func() {
		s, err := lis.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(5 * time.Second))
		conn := tls.Server(s, server)
		err = conn.Handshake()
		if err == nil { // TLS 1.3: the client's certificate is checked after the client's Finished
			_, err = conn.Read(make([]byte, 1))
		}
		srvErr <- err
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	cc := tls.Client(c, client)
	cliErr := cc.Handshake()
	if cliErr == nil {
		_, _ = cc.Write([]byte{1})
	}
	if err := <-srvErr; err != nil {
		return err
	}
	return cliErr
}

func TestHandshakes(t *testing.T) {
	ca := testpki.Must(testpki.NewCA("fanout CA"))
	other := testpki.Must(testpki.NewCA("another CA"))
	a, _ := node(t, ca, dns("a"), ca)
	b, _ := node(t, ca, dns("b"), ca)
	stranger, _ := node(t, other, dns("c"), other)
	expired, _ := node(t, ca, testpki.Leaf{DNSNames: []string{"d.fanout"}, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, ca)

	if err := handshake(t, a.ClientConfig(), b.ServerConfig()); err != nil {
		t.Fatalf("a → b, both from the CA: %v", err)
	}
	for name, client := range map[string]*tls.Config{
		// The client trusts anything, so that the server's check is the one tested.
		"a certificate from another CA": {MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, GetClientCertificate: stranger.ClientConfig().GetClientCertificate},
		"an expired certificate":        {MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, GetClientCertificate: expired.ClientConfig().GetClientCertificate},
		"no certificate":                {MinVersion: tls.VersionTLS13, InsecureSkipVerify: true},
		"TLS 1.2":                       {MaxVersion: tls.VersionTLS12, InsecureSkipVerify: true, GetClientCertificate: a.ClientConfig().GetClientCertificate},
	} {
		err := handshake(t, client, b.ServerConfig())
		if err == nil {
			t.Errorf("b accepted a client with %s", name)
		}
		t.Logf("a client with %s: %v", name, err)
	}
	// And the client side refuses a server it cannot verify.
	if err := handshake(t, a.ClientConfig(), stranger.ServerConfig()); err == nil {
		t.Error("a accepted a server with a certificate from another CA")
	}
	if err := handshake(t, a.ClientConfig(), expired.ServerConfig()); err == nil {
		t.Error("a accepted a server with an expired certificate")
	}
}

// TestRotation: a new CA is added to every bundle, then every node gets a certificate
// from it, then the old CA is dropped; handshakes work at every step, and a
// half-written file keeps the old material.
func TestRotation(t *testing.T) {
	oldCA := testpki.Must(testpki.NewCA("old CA"))
	newCA := testpki.Must(testpki.NewCA("new CA"))
	a, fa := node(t, oldCA, dns("a"), oldCA)
	b, fb := node(t, oldCA, dns("b"), oldCA)
	dirA, dirB := filepath.Dir(fa.Cert), filepath.Dir(fb.Cert)

	step := func(what string, write func() error, reloadsA, reloadsB uint64) {
		t.Helper()
		if err := write(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, what, func() bool { return a.Reloads() >= reloadsA && b.Reloads() >= reloadsB })
		if err := handshake(t, a.ClientConfig(), b.ServerConfig()); err != nil {
			t.Fatalf("%s: a → b: %v", what, err)
		}
		if err := handshake(t, b.ClientConfig(), a.ServerConfig()); err != nil {
			t.Fatalf("%s: b → a: %v", what, err)
		}
	}
	step("both CAs in the bundles", func() error {
		if _, err := oldCA.Write(dirA, dns("a"), oldCA, newCA); err != nil {
			return err
		}
		_, err := oldCA.Write(dirB, dns("b"), oldCA, newCA)
		return err
	}, 1, 1)
	step("a on the new CA", func() error { _, err := newCA.Write(dirA, dns("a"), oldCA, newCA); return err }, 2, 1)
	step("b on the new CA", func() error { _, err := newCA.Write(dirB, dns("b"), oldCA, newCA); return err }, 2, 2)
	step("the old CA dropped", func() error {
		if _, err := newCA.Write(dirA, dns("a"), newCA); err != nil {
			return err
		}
		_, err := newCA.Write(dirB, dns("b"), newCA)
		return err
	}, 3, 3)

	// A key that does not match the certificate (a rotation caught half-way) is
	// refused and the old material kept.
	if err := os.WriteFile(fa.Key, []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a to notice the broken key", func() bool { return a.Failures() > 0 })
	if err := handshake(t, a.ClientConfig(), b.ServerConfig()); err != nil {
		t.Fatalf("a with a broken key file kept its old one: %v", err)
	}
}

func TestIdentities(t *testing.T) {
	ca := testpki.Must(testpki.NewCA("ca"))
	s, _ := node(t, ca, testpki.Leaf{DNSNames: []string{"fanout-0.fanout.prod.svc.cluster.local", "fanout-0.fanout.prod.svc", "*.fanout.prod.svc", "fanout-0"}}, ca)
	if got := s.Identities(); len(got) != 1 || got[0] != "fanout-0" {
		t.Errorf("identities %v, want [fanout-0] (first labels, wildcards dropped, once each)", got)
	}
	if !s.Has("fanout-0") || s.Has("fanout-1") {
		t.Error("Has")
	}

	dir := t.TempDir()
	f, err := ca.Write(dir, testpki.Leaf{DNSNames: []string{"*.fanout.prod.svc"}}, ca)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Files: Files(f)}); err == nil || !strings.Contains(err.Error(), "names no node") {
		t.Errorf("a wildcard-only certificate: %v, want an error saying it names no node", err)
	}
	if _, err := Open(Config{Files: Files{Cert: f.Cert}}); err == nil || !strings.Contains(err.Error(), "key, ca not given") {
		t.Errorf("only a cert: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
