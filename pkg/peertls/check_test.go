package peertls

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/testpki"
)

// fakeNow is a clock a test moves.
type fakeNow struct{ t atomic.Pointer[time.Time] }

func newFakeNow(t time.Time) *fakeNow { f := &fakeNow{}; f.set(t); return f }
func (f *fakeNow) set(t time.Time)    { f.t.Store(&t) }
func (f *fakeNow) now() time.Time     { return *f.t.Load() }

// logBuf collects a Source's log lines; safe for the Source's goroutine.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOpenChecks: Open refuses a certificate for another node or one that does not
// chain to its bundle, naming what is wrong, and takes an expired one (or one not
// valid yet), which Valid then reports.
func TestOpenChecks(t *testing.T) {
	ca := testpki.Must(testpki.NewCA("ca"))
	other := testpki.Must(testpki.NewCA("other"))
	now := time.Now()
	cases := []struct {
		name    string
		signer  *testpki.CA
		leaf    testpki.Leaf
		bundle  *testpki.CA
		openErr string // substring of Open's error; "" if Open succeeds
		invalid string // substring of Valid's error; "" for nil
	}{
		{name: "valid", signer: ca, leaf: dns("a"), bundle: ca},
		{name: "another node", signer: ca, leaf: dns("b"), bundle: ca, openErr: `names node b (the first label of its DNS names), not this node's id "a"`},
		{name: "another CA than the bundle", signer: other, leaf: dns("a"), bundle: ca, openErr: "does not chain to the CA bundle"},
		{name: "expired", signer: ca, leaf: testpki.Leaf{DNSNames: []string{"a.fanout"}, NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour)},
			bundle: ca, invalid: "expired at"},
		{name: "not valid yet", signer: ca, leaf: testpki.Leaf{DNSNames: []string{"a.fanout"}, NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)},
			bundle: ca, invalid: "is valid from"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := testpki.Must(tc.signer.Write(t.TempDir(), tc.leaf, tc.bundle))
			s, err := Open(Config{Files: Files(f), NodeID: "a"})
			if tc.openErr != "" {
				if err == nil {
					s.Close()
					t.Fatalf("Open took it; want an error saying %q", tc.openErr)
				}
				if !strings.Contains(err.Error(), tc.openErr) || !strings.Contains(err.Error(), f.Cert) {
					t.Fatalf("Open: %v; want it to name %s and say %q", err, f.Cert, tc.openErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			err = s.Valid()
			var nv *NotValidError
			switch {
			case tc.invalid == "" && err != nil:
				t.Errorf("Valid: %v, want nil", err)
			case tc.invalid != "" && (!errors.As(err, &nv) || !strings.Contains(err.Error(), tc.invalid) || !strings.Contains(err.Error(), "every peer refuses it")):
				t.Errorf("Valid: %v, want a NotValidError saying %q and that every peer refuses it", err, tc.invalid)
			}
		})
	}
}

// TestReloadRefused: a reload that fails any check of Open, or whose certificate is
// not valid now, keeps the material in use (handshakes go on with it), counts one
// failure and logs one WARN per distinct reading and reason, however many times the
// files are read again; a good rotation afterwards is taken.
func TestReloadRefused(t *testing.T) {
	ca := testpki.Must(testpki.NewCA("ca"))
	other := testpki.Must(testpki.NewCA("other"))
	peer, _ := node(t, ca, dns("b"), ca)
	now := time.Now()
	cases := []struct {
		name  string
		write func(dir string) error
		want  string // substring of the WARN's err
	}{
		{"an expired certificate", func(dir string) error {
			_, err := ca.Write(dir, testpki.Leaf{DNSNames: []string{"a.fanout"}, NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour)}, ca)
			return err
		}, "expired at"},
		{"a certificate not valid yet", func(dir string) error {
			_, err := ca.Write(dir, testpki.Leaf{DNSNames: []string{"a.fanout"}, NotBefore: now.Add(time.Hour)}, ca)
			return err
		}, "is valid from"},
		{"another node's certificate", func(dir string) error { _, err := ca.Write(dir, dns("c"), ca); return err },
			"names node c (the first label of its DNS names), not this node's id"},
		{"a certificate from a CA not in the bundle", func(dir string) error { _, err := other.Write(dir, dns("a"), ca); return err },
			"does not chain to the CA bundle"},
		{"a bundle without the certificate's CA", func(dir string) error { _, err := ca.Write(dir, dns("a"), other); return err },
			"does not chain to the CA bundle"},
		{"a key that does not match", func(dir string) error {
			return os.WriteFile(dir+"/tls.key", []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), 0o600)
		}, "with key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f := testpki.Must(ca.Write(dir, dns("a"), ca))
			var logs logBuf
			s, err := Open(Config{Files: Files(f), NodeID: "a", Interval: 10 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			before := s.NotAfter()
			if err := tc.write(dir); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the refusal counted", func() bool { return s.Failures() > 0 })
			// Five more readings of the same files: neither counted nor logged again.
			r := s.readings.Load()
			waitFor(t, "five more readings", func() bool { return s.readings.Load() >= r+5 })
			if got := s.Failures(); got != 1 {
				t.Errorf("failures %d after several readings of the same refused files, want 1", got)
			}
			if n := strings.Count(logs.String(), "peer TLS files refused"); n != 1 {
				t.Errorf("%d WARN lines, want 1:\n%s", n, logs.String())
			}
			if !strings.Contains(logs.String(), tc.want) || !strings.Contains(logs.String(), "level=WARN") {
				t.Errorf("the WARN does not say %q:\n%s", tc.want, logs.String())
			}
			if s.Reloads() != 0 || !s.NotAfter().Equal(before) || !s.Has("a") || s.Valid() != nil {
				t.Errorf("the refused files replaced the material in use: reloads %d, identities %v, not after %v (was %v), valid %v",
					s.Reloads(), s.Identities(), s.NotAfter(), before, s.Valid())
			}
			if err := handshake(t, s.ClientConfig(), peer.ServerConfig()); err != nil {
				t.Errorf("a → b with the kept material: %v", err)
			}
			if err := handshake(t, peer.ClientConfig(), s.ServerConfig()); err != nil {
				t.Errorf("b → a with the kept material: %v", err)
			}
			testpki.Must(ca.Write(dir, dns("a"), ca))
			waitFor(t, "a good rotation taken", func() bool { return s.Reloads() == 1 })
		})
	}
}

// TestValidWhileRunning: a certificate that expires while the node runs makes Valid
// fail from that moment; a renewed one written then is taken, and Valid is nil again.
func TestValidWhileRunning(t *testing.T) {
	ca := testpki.Must(testpki.NewCA("ca"))
	start := time.Now()
	dir := t.TempDir()
	f := testpki.Must(ca.Write(dir, testpki.Leaf{DNSNames: []string{"a.fanout"}, NotAfter: start.Add(time.Hour)}, ca))
	clock := newFakeNow(start)
	s, err := Open(Config{Files: Files(f), NodeID: "a", Interval: 10 * time.Millisecond, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Valid(); err != nil {
		t.Fatalf("Valid at start: %v", err)
	}
	clock.set(start.Add(time.Hour + time.Minute))
	var nv *NotValidError
	if err := s.Valid(); !errors.As(err, &nv) || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("Valid a minute past NotAfter: %v", err)
	}
	testpki.Must(ca.Write(dir, testpki.Leaf{DNSNames: []string{"a.fanout"}, NotAfter: start.Add(48 * time.Hour)}, ca))
	waitFor(t, "the renewed certificate taken", func() bool { return s.Reloads() == 1 })
	if err := s.Valid(); err != nil {
		t.Errorf("Valid after the renewal: %v", err)
	}
}
