package sidecar

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/jetstream"
	"github.com/fanout/fanout/pkg/peertls"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
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

// natsAuth are the connection's NKey, credentials and TLS options, read from their files now, so
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
	if c.CredsFile != "" {
		if err := checkCreds(c.CredsFile); err != nil {
			return nil, configerr.Wrap("sidecar.Config.NATS.CredsFile", err, "")
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
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

// checkCreds reads a NATS credentials file now, as the client would at each
// connect, so that a missing, unreadable or garbled one is refused at start: it
// must hold a user JWT block and a user NKey seed block, the seed of the JWT's
// subject.
func checkCreds(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Contains(b, []byte("-----BEGIN NATS USER JWT-----")) {
		return fmt.Errorf("%s holds no user JWT block (-----BEGIN NATS USER JWT-----): give a credentials file as `nsc generate creds` writes it", path)
	}
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		return fmt.Errorf("%s: user JWT: %w", path, err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s: user NKey seed: %w", path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("%s: user NKey seed: %w", path, err)
	}
	sub, err := jwtSubject(token)
	if err != nil {
		return fmt.Errorf("%s: user JWT: %w", path, err)
	}
	if sub != pub {
		return fmt.Errorf("%s: the user JWT is of %s, the seed of %s: the file mixes two users' halves", path, sub, pub)
	}
	return nil
}

// jwtSubject is the "sub" claim of a JWT, read without checking its signature (the
// server checks it).
func jwtSubject(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("not a JWT (%d dot-separated parts, want 3)", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	if claims.Sub == "" {
		return "", errors.New("no subject (sub) claim")
	}
	return claims.Sub, nil
}
