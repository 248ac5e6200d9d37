package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/jetstream"
	"github.com/fanout/fanout/pkg/peertls"
	"github.com/nats-io/nats.go"
)

// dialNATS opens the NATS connection of TransportJetStream. It never waits for a
// server: an unreachable NATS at start is a node that is not ready and says why (the
// transport retries), not a sidecar that fails; the client reconnects forever, since
// the stream is the only way this node's events reach anyone.
func dialNATS(c NATSConfig, nodeID string, log *slog.Logger) (*nats.Conn, error) {
	auth, err := natsAuth(c)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(strings.Join(c.URLs, ","), append(auth,
		nats.Name("fanout-sidecar "+nodeID),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("NATS disconnected; reconnecting", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted())
		}),
	)...)
	if err != nil {
		return nil, configerr.Wrap("sidecar.Config.NATS.URLs", err, "%s", strings.Join(c.URLs, ","))
	}
	return nc, nil
}

// withJetStream makes a JetStream stream (pkg/jetstream) the node's transport on s.nc:
// fanout.New builds it (NewTransport) with the node's limits. s.js is set once
// fanout.New has built it.
func (s *Sidecar) withJetStream() {
	jc := s.cfg.JetStream
	jc.Limits, jc.Logger = s.cfg.Node.Limits, s.log.With("component", "jetstream")
	jc.TombstoneTTL = s.cfg.Node.State.TombstoneTTL // a marker lives as long as a tombstone
	if s.store != nil {
		jc.Checkpoint = s.store // the feed's sequence and the outbox's mark, beside the table
	}
	s.cfg.Node.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
		t, err := jetstream.New(jc, s.nc, n)
		if err != nil {
			return nil, err
		}
		s.js = t
		return t, nil
	}
}

// natsAuth are the connection's NKey and TLS options, read from their files now, so
// that a bad file is an error naming its field at start rather than a connection
// that never succeeds.
func natsAuth(c NATSConfig) ([]nats.Option, error) {
	var opts []nats.Option
	if c.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeyFile)
		if err != nil {
			return nil, configerr.Wrap("sidecar.Config.NATS.NKeyFile", err, "")
		}
		opts = append(opts, o)
	}
	if c.TLS == (peertls.Files{}) {
		return opts, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLS.CA != "" {
		pem, err := os.ReadFile(c.TLS.CA)
		if err != nil {
			return nil, configerr.Wrap("sidecar.Config.NATS.TLS.CA", err, "")
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, configerr.New("sidecar.Config.NATS.TLS.CA", "%s holds no PEM certificate", c.TLS.CA)
		}
	}
	if c.TLS.Cert != "" {
		certPEM, err := os.ReadFile(c.TLS.Cert)
		if err != nil {
			return nil, configerr.Wrap("sidecar.Config.NATS.TLS.Cert", err, "")
		}
		keyPEM, err := os.ReadFile(c.TLS.Key)
		if err != nil {
			return nil, configerr.Wrap("sidecar.Config.NATS.TLS.Key", err, "")
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, configerr.Wrap("sidecar.Config.NATS.TLS.Cert", err, "with key %s", c.TLS.Key)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return append(opts, nats.Secure(tc)), nil
}
