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
// # Checks
//
// The node's own material must pass the checks its peers will make of it, and the same
// ones at Open and at every reload (check.go):
//
//  1. the certificate and its key parse and match;
//  2. the certificate names the node (Config.NodeID among its identities);
//  3. it chains to the CA bundle read with it, for both server and client auth;
//  4. it is valid now (not expired, not before its NotBefore).
//
// At Open, failing 1 to 3 is an error: the node does not start. Failing 4 is not: the
// Source opens, Valid says why the certificate is unusable, and the node reports not
// ready until a valid certificate is written (cert-manager may be about to renew it).
// Valid is read again at every readiness check, so a certificate that expires while
// the node runs makes it not ready too.
//
// # Rotation
//
// A Source reads the three PEM files at Open and again every Interval. A change that
// passes every check replaces the material for the next handshakes. One that does not
// (a half-written rotation, an expired certificate, one for another node or from
// another CA) is refused: the old material stays, Failures counts the refused reading
// and a WARN says why, once per distinct reading and reason, until the files pass.
// Established connections are never closed: a connection is authenticated once, at
// its handshake, as in every TLS server.
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
	// NodeID, if set, must be among the certificate's identities, at Open and at
	// every reload. "": not checked (a client that is not a node, such as a test's).
	NodeID string
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
	readings          atomic.Uint64 // reloads attempted, for tests: every Interval

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
	raw, err := cfg.Files.read()
	if err != nil {
		return nil, err
	}
	m, err := parse(cfg.Files, raw)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkOwn(m); err != nil {
		return nil, err
	}
	s := &Source{cfg: cfg, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	s.cur.Store(m)
	if err := s.Valid(); err != nil {
		log.Warn("peer TLS certificate unusable now; this node is not ready until a valid one is written", "err", err.Error())
	}
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

// read reads the three files: certificate, key, CA bundle.
func (f Files) read() ([3][]byte, error) {
	var raw [3][]byte
	for i, p := range []string{f.Cert, f.Key, f.CA} {
		b, err := os.ReadFile(p)
		if err != nil {
			return raw, err
		}
		raw[i] = b
	}
	return raw, nil
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

// Reloads counts the material's changes; Failures the refused readings, each
// distinct reading and reason once (a file that stays broken counts once, not every
// Interval).
func (s *Source) Reloads() uint64  { return s.reloads.Load() }
func (s *Source) Failures() uint64 { return s.failures.Load() }

// Valid reports whether the certificate in use is valid now, and if not, why: every
// peer refuses an expired certificate (or one not valid yet), so the node is not
// ready while it holds one.
func (s *Source) Valid() error { return validNow(s.cur.Load(), s.cfg.Files.Cert, s.cfg.Now()) }

func (s *Source) run() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	var last refusal // owned by this goroutine
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.reload(&last)
	}
}

// refusal is the last reading the Source refused and why; the same reading refused
// for the same reason again is neither counted nor logged again.
type refusal struct {
	raw    [3][]byte
	reason string // the error's text; for a *NotValidError, whose text tells the time, its kind
}

func newRefusal(raw [3][]byte, err error) refusal {
	var nv *NotValidError
	if errors.As(err, &nv) {
		return refusal{raw: raw, reason: "not valid now"}
	}
	return refusal{raw: raw, reason: err.Error()}
}

func (r refusal) same(o refusal) bool { return r.reason == o.reason && sameRaw(r.raw, o.raw) }

func sameRaw(a, b [3][]byte) bool {
	return bytes.Equal(a[0], b[0]) && bytes.Equal(a[1], b[1]) && bytes.Equal(a[2], b[2])
}

// reload reads the files and, if they changed and pass every check, takes them; if
// they fail one, it keeps the material in use, and counts and logs the refusal once.
func (s *Source) reload(last *refusal) {
	defer s.readings.Add(1)
	raw, err := s.cfg.Files.read()
	if err == nil {
		if sameRaw(raw, s.cur.Load().raw) {
			*last = refusal{}
			return
		}
		var m *material
		if m, err = s.take(raw); err == nil {
			*last = refusal{}
			s.log.Info("peer TLS reloaded", "identities", m.ids, "not_after", m.cert.Leaf.NotAfter)
			return
		}
	}
	r := newRefusal(raw, err)
	if r.same(*last) {
		return
	}
	*last = r
	s.failures.Add(1)
	cur := s.cur.Load()
	s.log.Warn("peer TLS files refused; keeping the certificate in use", "err", err.Error(),
		"identities", cur.ids, "not_after", cur.cert.Leaf.NotAfter)
}

// take checks raw as Open does, and also that its certificate is valid now (a node
// never swaps a usable certificate for one its peers refuse), and makes it current.
func (s *Source) take(raw [3][]byte) (*material, error) {
	m, err := parse(s.cfg.Files, raw)
	if err != nil {
		return nil, err
	}
	if err := validNow(m, s.cfg.Files.Cert, s.cfg.Now()); err != nil {
		return nil, err
	}
	if err := s.cfg.checkOwn(m); err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.reloads.Add(1)
	return m, nil
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
