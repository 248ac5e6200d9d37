// Package peertls is mutual TLS between sidecars: the certificate, key and CA bundle
// a node presents and trusts, reloaded from their files while the node runs, and the
// node identities a certificate carries.
//
// # Identity
//
// A peer's node ids are the first labels of the DNS names in its certificate's
// subject alternative names: a certificate for fanout-0.fanout.prod.svc.cluster.local
// is node fanout-0, which is the pod's hostname and so the sidecar's default
// --node-id. Wildcard names (*.fanout…) name no node. This is the shape cert-manager
// issues for a pod (its csi-driver templates dnsNames with the pod's name) and any
// CA can: no SPIFFE runtime is needed. A node refuses to start when its own --node-id
// is not among its certificate's identities, and a Replicate whose origin_node is not
// among its caller's is refused (package fanout).
//
// # Rotation
//
// A Source reads the three PEM files at Open and again every Interval. A change that
// parses and whose key matches its certificate replaces the material for the next
// handshakes; one that does not (a half-written rotation) is logged and the old
// material stays until the files are whole again. Established connections are never
// closed: a connection is authenticated once, at its handshake, as in every TLS
// server.
package peertls

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Files are the PEM files of a node's peer TLS (cert-manager and SPIRE write these
// three: tls.crt, tls.key, ca.crt).
type Files struct {
	Cert string // the node's certificate chain, leaf first
	Key  string // its private key
	CA   string // the CA bundle peers' certificates must chain to
}

// Config configures a Source.
type Config struct {
	Files Files
	// Interval is how often the files are read again. 0 means DefaultInterval.
	Interval time.Duration
	// Logger receives the reloads and the failed reads. nil discards.
	Logger *slog.Logger
	// Now is the clock certificates are verified against. nil means time.Now.
	Now func() time.Time
}

// DefaultInterval: a rotation takes effect within a second, for three small reads.
const DefaultInterval = time.Second

// material is one consistent reading of the files.
type material struct {
	cert  *tls.Certificate // with Leaf set
	roots *x509.CertPool
	ids   []string // the leaf's node identities
	raw   [3][]byte
}

// Source holds the current material and reloads it. Its methods are safe for
// concurrent use.
type Source struct {
	cfg Config
	log *slog.Logger
	cur atomic.Pointer[material]

	reloads, failures atomic.Uint64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Open reads and checks the files, and starts reloading them every Interval. Close
// stops it.
func Open(cfg Config) (*Source, error) {
	if err := cfg.Files.check(); err != nil {
		return nil, err
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := load(cfg.Files)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	s.cur.Store(m)
	go s.run()
	return s, nil
}

func (f Files) check() error {
	var missing []string
	for _, x := range []struct{ name, v string }{{"cert", f.Cert}, {"key", f.Key}, {"ca", f.CA}} {
		if x.v == "" {
			missing = append(missing, x.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("peer TLS needs a certificate, its key and a CA bundle; %s not given", strings.Join(missing, ", "))
	}
	return nil
}

// load reads the three files and checks that they make a usable identity.
func load(f Files) (*material, error) {
	var raw [3][]byte
	for i, p := range []string{f.Cert, f.Key, f.CA} {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		raw[i] = b
	}
	return parse(f, raw)
}

func parse(f Files, raw [3][]byte) (*material, error) {
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, fmt.Errorf("certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(raw[2]) {
		return nil, fmt.Errorf("CA bundle %s: no PEM certificate in it", f.CA)
	}
	ids := Identities(cert.Leaf)
	if len(ids) == 0 {
		return nil, fmt.Errorf("certificate %s names no node: it needs a DNS name whose first label is the node id (e.g. fanout-0.fanout.prod.svc), has %v",
			f.Cert, cert.Leaf.DNSNames)
	}
	return &material{cert: &cert, roots: roots, ids: ids, raw: raw}, nil
}

// Identities are the node ids a certificate carries: the first label of each DNS
// name, wildcards excluded, without repeats.
func Identities(c *x509.Certificate) []string {
	if c == nil {
		return nil
	}
	var ids []string
	for _, name := range c.DNSNames {
		label, _, _ := strings.Cut(name, ".")
		if label == "" || strings.Contains(label, "*") {
			continue
		}
		if !slices.Contains(ids, label) {
			ids = append(ids, label)
		}
	}
	return ids
}

// Identities are this node's own, from its current certificate.
func (s *Source) Identities() []string { return s.cur.Load().ids }

// Has reports whether id is among this node's identities.
func (s *Source) Has(id string) bool { return slices.Contains(s.Identities(), id) }

// NotAfter is when the current certificate expires.
func (s *Source) NotAfter() time.Time { return s.cur.Load().cert.Leaf.NotAfter }

// Reloads and Failures count the material's changes and the readings that failed.
func (s *Source) Reloads() uint64  { return s.reloads.Load() }
func (s *Source) Failures() uint64 { return s.failures.Load() }

func (s *Source) run() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		changed, err := s.reload()
		switch {
		case err != nil:
			s.failures.Add(1)
			if msg := err.Error(); msg != lastErr { // once per distinct failure
				s.log.Warn("peer TLS files unusable; keeping the previous certificate", "err", msg)
				lastErr = msg
			}
		case changed:
			lastErr = ""
			m := s.cur.Load()
			s.log.Info("peer TLS reloaded", "identities", m.ids, "not_after", m.cert.Leaf.NotAfter)
		}
	}
}

// reload reads the files and, if they changed and are usable, takes them.
func (s *Source) reload() (bool, error) {
	var raw [3][]byte
	for i, p := range []string{s.cfg.Files.Cert, s.cfg.Files.Key, s.cfg.Files.CA} {
		b, err := os.ReadFile(p)
		if err != nil {
			return false, err
		}
		raw[i] = b
	}
	old := s.cur.Load()
	if bytes.Equal(raw[0], old.raw[0]) && bytes.Equal(raw[1], old.raw[1]) && bytes.Equal(raw[2], old.raw[2]) {
		return false, nil
	}
	m, err := parse(s.cfg.Files, raw)
	if err != nil {
		return false, err
	}
	s.cur.Store(m)
	s.reloads.Add(1)
	return true, nil
}

// Close stops the reloading. It is safe to call more than once.
func (s *Source) Close() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}

// ServerConfig is the peer listener's TLS: TLS 1.3 only, the current certificate,
// and a client certificate required and verified against the current CA bundle at
// every handshake.
func (s *Source) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.cur.Load()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*m.cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    m.roots,
				NextProtos:   []string{"h2"},
				Time:         s.cfg.Now,
			}, nil
		},
	}
}

// ClientConfig is the TLS of connections to peers: TLS 1.3 only, the current
// certificate as the client's, and the peer's certificate verified against the
// current CA bundle. Any node's certificate from the CA is accepted for any peer
// address: peers are equals, and what a peer may write is bound to its identity by
// the receiver.
func (s *Source) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
		// The roots change with the files, and a tls.Config's RootCAs cannot: the
		// built-in check is off and VerifyConnection does the same against the
		// current bundle (crypto/tls's documented way to customise verification).
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
		},
	}
}

var errNoCert = errors.New("peer presented no certificate")

func (s *Source) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return errNoCert
	}
	m := s.cur.Load()
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots: m.roots, Intermediates: inter, CurrentTime: s.cfg.Now(),
		KeyUsages: []x509.ExtKeyUsage{usage},
	})
	return err
}

// ServerCredentials and ClientCredentials are the gRPC transport credentials of the
// peer listener and of peer connections.
func (s *Source) ServerCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(s.ServerConfig())
}

func (s *Source) ClientCredentials() credentials.TransportCredentials {
	return credentials.NewTLS(s.ClientConfig())
}

// Caller returns the node identities of the peer that made the gRPC call in ctx,
// from its verified certificate. ok is false when the call did not come over TLS
// with a client certificate.
func Caller(ctx context.Context) (ids []string, ok bool) {
	p, found := peer.FromContext(ctx)
	if !found {
		return nil, false
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, false
	}
	return Identities(info.State.VerifiedChains[0][0]), true
}
