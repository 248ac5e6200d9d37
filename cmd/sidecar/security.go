package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/fanout/fanout/pkg/apptoken"
	"github.com/fanout/fanout/pkg/peertls"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

// securityOptions are serve's flags for authenticating peers and local apps.
type securityOptions struct {
	peerTLS       peertls.Files
	appTokenFile  string
	appSocketMode string
}

// defaultSocketMode: only the sidecar's own user may connect to a unix app socket.
// An app container running as another user in the same group needs 0660.
const defaultSocketMode = "0600"

func (o *securityOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.peerTLS.Cert, "peer-tls-cert", "", "PEM certificate chain this node presents to its peers (e.g. cert-manager's tls.crt); with --peer-tls-key and --peer-tls-ca, peers use mutual TLS 1.3; the files are re-read every second, so a rotation needs no restart")
	fs.StringVar(&o.peerTLS.Key, "peer-tls-key", "", "PEM private key of --peer-tls-cert (tls.key)")
	fs.StringVar(&o.peerTLS.CA, "peer-tls-ca", "", "PEM CA bundle a peer's certificate must chain to (ca.crt); a peer without such a certificate is refused at the handshake")
	fs.StringVar(&o.appTokenFile, "app-token-file", "", "file holding the bearer token apps must send on the app listener (metadata \"authorization: Bearer <token>\"); re-read every second; the health service stays open for probes (empty: no token, fine on loopback or a unix socket)")
	fs.StringVar(&o.appSocketMode, "app-socket-mode", defaultSocketMode, "file mode of a unix:// --app-addr socket, octal (0600: only this user may connect; 0660 lets the group in)")
}

// socketMode parses --app-socket-mode.
func (o securityOptions) socketMode() (os.FileMode, error) {
	mode := o.appSocketMode
	if mode == "" { // an instance started without the flags (demo)
		mode = defaultSocketMode
	}
	m, err := strconv.ParseUint(mode, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("--app-socket-mode %q: want an octal file mode such as 0600 or 0660", o.appSocketMode)
	}
	return os.FileMode(m), nil
}

// openAppToken opens --app-token-file (nil, nil without one).
func (o securityOptions) openAppToken(log *slog.Logger) (*apptoken.Token, error) {
	if o.appTokenFile == "" {
		return nil, nil
	}
	t, err := apptoken.Open(apptoken.Config{Path: o.appTokenFile, Logger: log.With("component", "app-token")})
	if err != nil {
		return nil, fmt.Errorf("--app-token-file: %w", err)
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
func (o securityOptions) openPeerTLS(nodeID string, log *slog.Logger) (*peertls.Source, error) {
	f := o.peerTLS
	if f == (peertls.Files{}) {
		return nil, nil
	}
	src, err := peertls.Open(peertls.Config{Files: f, NodeID: nodeID, Logger: log.With("component", "peer-tls")})
	var wrong *peertls.WrongNodeError
	switch {
	case errors.As(err, &wrong):
		return nil, fmt.Errorf("--peer-tls-cert: %w: peers would refuse its events; issue the certificate for %s.<your domain>, or start with --node-id %s",
			err, nodeID, wrong.IDs[0])
	case err != nil:
		return nil, fmt.Errorf("--peer-tls-cert, --peer-tls-key, --peer-tls-ca: %w", err)
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
