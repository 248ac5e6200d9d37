package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/fanout/fanout/pkg/apptoken"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/peertls"
	"github.com/prometheus/client_golang/prometheus"
)

// openAppToken opens Config.AppTokenFile (nil, nil without one).
func openAppToken(path string, log *slog.Logger) (*apptoken.Token, error) {
	if path == "" {
		return nil, nil
	}
	t, err := apptoken.Open(apptoken.Config{Path: path, Logger: log.With("component", "app-token")})
	if err != nil {
		return nil, configerr.Wrap("sidecar.Config.AppTokenFile", err, "")
	}
	return t, nil
}

// exposed reports whether an app listener address is reachable from other hosts:
// not a unix socket and not a loopback address.
func exposed(addr string) bool {
	if strings.HasPrefix(addr, "unix://") {
		return false
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// openPeerTLS opens the peer TLS files, if any were given (nil, nil if none), and
// checks them as every reload will (peertls, "Checks"): nodeID among the
// certificate's identities (the node's peers will take its events only under those),
// and the certificate chaining to the CA bundle. An expired certificate is not an
// error here: the node starts, not ready, until a renewed one is written.
func openPeerTLS(f peertls.Files, nodeID string, log *slog.Logger) (*peertls.Source, error) {
	if f == (peertls.Files{}) {
		return nil, nil
	}
	src, err := peertls.Open(peertls.Config{Files: f, NodeID: nodeID, Logger: log.With("component", "peer-tls")})
	var wrong *peertls.WrongNodeError
	switch {
	case errors.As(err, &wrong):
		return nil, &configerr.Error{Field: "sidecar.Config.PeerTLS.Cert", Err: err, Problem: fmt.Sprintf(
			"%v: peers would refuse its events; issue the certificate for %s.<your domain>, or start with sidecar.Config.Node.NodeID %s",
			err, nodeID, wrong.IDs[0])}
	case err != nil:
		return nil, configerr.Wrap("sidecar.Config.PeerTLS", err, "")
	}
	return src, nil
}

// peerTLSMetrics are the series of the peer TLS files: how often they were reloaded
// or found unusable, and when the certificate in use expires (alert well before).
func peerTLSMetrics(src *peertls.Source) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fanout_peer_tls_reloads_total",
			Help: "Times the peer TLS files changed and the new certificate, key and CA bundle were taken."},
			func() float64 { return float64(src.Reloads()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "fanout_peer_tls_reload_failures_total",
			Help: "Changed peer TLS files refused (unreadable, a key that does not match, another node's certificate, one that does not chain to the CA bundle, or expired): the previous ones stayed in use. Each distinct reading and reason counts once."},
			func() float64 { return float64(src.Failures()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "fanout_peer_tls_cert_expiry_timestamp_seconds",
			Help: "When the peer certificate in use expires (Unix seconds)."},
			func() float64 { return float64(src.NotAfter().Unix()) }),
	}
}
