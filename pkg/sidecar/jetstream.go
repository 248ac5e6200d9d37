package sidecar

import (
	"log/slog"
	"strings"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/jetstream"
	"github.com/nats-io/nats.go"
)

// dialNATS opens the NATS connection of TransportJetStream. It never waits for a
// server: an unreachable NATS at start is a node that is not ready and says why (the
// transport retries), not a sidecar that fails; the client reconnects forever, since
// the stream is the only way this node's events reach anyone.
func dialNATS(c NATSConfig, nodeID string, log *slog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(strings.Join(c.URLs, ","),
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
	)
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
	s.cfg.Node.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
		t, err := jetstream.New(jc, s.nc, n)
		if err != nil {
			return nil, err
		}
		s.js = t
		return t, nil
	}
}
