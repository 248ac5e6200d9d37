package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/fanout/fanout/pkg/sidecar"
	"github.com/spf13/pflag"
)

// addSecurityFlags registers serve's flags for authenticating peers and local apps.
func addSecurityFlags(fs *pflag.FlagSet, c *sidecar.Config, appSocketMode *string) {
	fs.StringVar(&c.PeerTLS.Cert, "peer-tls-cert", "", "PEM certificate chain this node presents to its peers (e.g. cert-manager's tls.crt); with --peer-tls-key and --peer-tls-ca, peers use mutual TLS 1.3; the files are re-read every second, so a rotation needs no restart")
	fs.StringVar(&c.PeerTLS.Key, "peer-tls-key", "", "PEM private key of --peer-tls-cert (tls.key)")
	fs.StringVar(&c.PeerTLS.CA, "peer-tls-ca", "", "PEM CA bundle a peer's certificate must chain to (ca.crt); a peer without such a certificate is refused at the handshake")
	fs.StringVar(&c.AppTokenFile, "app-token-file", "", "file holding the bearer token apps must send on the app listener (metadata \"authorization: Bearer <token>\"); re-read every second; the health service stays open for probes (empty: no token, fine on loopback or a unix socket)")
	fs.StringVar(appSocketMode, "app-socket-mode", *appSocketMode, "file mode of a unix:// --app-addr socket, octal (0600: only this user may connect; 0660 lets the group in)")
}

// socketMode parses --app-socket-mode.
func socketMode(mode string) (os.FileMode, error) {
	m, err := strconv.ParseUint(mode, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("--app-socket-mode %q: want an octal file mode such as 0600 or 0660", mode)
	}
	return os.FileMode(m), nil
}
