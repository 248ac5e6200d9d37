package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
)

// ErrTimeout is wrapped by Lookup's error when the DNS server did not answer within
// Config.Timeout (or the context's deadline). It has a Timeout method that says true,
// so refresh.IsTimeout counts it as a timeout, and the refresh backs off.
var ErrTimeout error = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string { return "discovery: DNS lookup timed out" }
func (timeoutError) Timeout() bool { return true }

// ErrNoRecords is wrapped by Lookup's error when DNS answered that there are no
// peers: the name does not exist (NXDOMAIN), has no records of the type asked, or its
// SRV records' targets have no addresses. A headless Service with no ready pod
// answers so; so does a misspelt name.
var ErrNoRecords = errors.New("discovery: no peer addresses in DNS")

// srvParallel bounds the SRV targets resolved at once: a Service of hundreds of pods
// resolves in a few round trips without a burst of hundreds of queries.
const srvParallel = 8

// Config configures a Resolver. NewResolver copies it.
type Config struct {
	// Server is the DNS server to ask, ip:port or a bare IP for port 53 (--dns-server).
	// Empty: the system's resolver and servers (/etc/resolv.conf).
	Server string
	// Timeout bounds one Lookup, all its queries together. 10s: Go's resolver, like
	// glibc's, waits 5s for an answer and then asks again (resolv.conf's timeout:5
	// and attempts:2), so 10s lets one lost UDP packet be retried.
	Timeout time.Duration
}

// DefaultConfig returns the system's resolver with a 10s timeout.
func DefaultConfig() Config {
	return Config{Timeout: 10 * time.Second}
}

func (c *Config) validate() error {
	if c.Timeout <= 0 {
		return configerr.New("discovery.Config.Timeout", "must be > 0, got %v", c.Timeout)
	}
	if c.Server == "" {
		return nil
	}
	s, err := ParseServer(c.Server)
	if err != nil {
		return configerr.New("discovery.Config.Server", "%v", err)
	}
	c.Server = s
	return nil
}

// ParseServer checks a --dns-server value, ip:port or a bare IP (port 53), and
// returns it as ip:port. A host name is refused: finding it would need DNS.
func ParseServer(s string) (string, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(ip, 53).String(), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return "", fmt.Errorf("%q is not an IP address with an optional port: give the DNS server's (10.96.0.10, 10.96.0.10:53, [fd00::a]:53)", s)
	}
	return ap.String(), nil
}

// Resolver looks Targets up. It is safe for concurrent use.
type Resolver struct {
	r       *net.Resolver
	server  string // Config.Server, ip:port; "" for the system's servers
	timeout time.Duration
}

// NewResolver returns a Resolver for cfg. With cfg.Server it uses Go's own resolver
// (the same answers on every platform) and sends every query to that server, over
// UDP and over TCP when an answer is truncated, as Go does; it still reads
// /etc/resolv.conf for the search list, ndots and the per-query timeout.
func NewResolver(cfg Config) (*Resolver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Resolver{r: net.DefaultResolver, server: cfg.Server, timeout: cfg.Timeout}
	if cfg.Server != "" {
		r.r = &net.Resolver{PreferGo: true, Dial: dialer(cfg.Server)}
	}
	return r, nil
}

// dialer returns a net.Resolver's Dial that sends every query to server, over the
// network the resolver asks for: "udp", or "tcp" after a truncated answer.
//
// Go's resolver bounds each query by a deadline on its connection (resolv.conf's
// timeout, 5s by default), not by its context. So the connection is closed when the
// context ends: a Lookup that gave up at Config.Timeout releases its sockets and
// goroutines at once, not seconds later.
func dialer(server string) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, server)
		if err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, func() { c.Close() })
		return c, nil
	}
}

// Lookup resolves t into the peers' addresses, ip:port (IPv6 as [ip]:port), sorted
// and without duplicates. It fails, and returns no addresses, with an error that
// wraps:
//
//   - ErrTimeout if a query went unanswered until Config.Timeout or ctx's
//     deadline: the caller should keep its peers and ask less often;
//   - ErrNoRecords if DNS answered that there are none;
//   - anything else otherwise: a refused connection, SERVFAIL, ctx cancelled.
//
// For an SRV target, a target without addresses is left out (its pod is gone); a
// timeout or error on any fails the whole Lookup, so that a slow server never makes
// peers look removed.
func (r *Resolver) Lookup(ctx context.Context, t Target) ([]string, error) {
	if !t.SRV && (t.Port < 1 || t.Port > 65535) {
		return nil, fmt.Errorf("discovery: %s: port out of range 1..65535", t)
	}
	// Go's resolver may still answer from a query it sends before it looks at ctx: a
	// cancelled Lookup must not return addresses (seen under load in TestLookupCancelled).
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var addrs []netip.AddrPort
	var err error
	if t.SRV {
		addrs, err = r.lookupSRV(ctx, t.Name)
	} else {
		addrs, err = r.lookupAddrs(ctx, t.Name, t.Port, nil)
	}
	if err != nil {
		return nil, r.classify(err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: %s: the SRV records name no target with an address", ErrNoRecords, t)
	}
	slices.SortFunc(addrs, netip.AddrPort.Compare)
	addrs = slices.Compact(addrs)
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = net.JoinHostPort(a.Addr().String(), strconv.Itoa(int(a.Port())))
	}
	return out, nil
}

// lookupAddrs appends name's A and AAAA addresses, with port, to dst.
func (r *Resolver) lookupAddrs(ctx context.Context, name string, port int, dst []netip.AddrPort) ([]netip.AddrPort, error) {
	ips, err := r.r.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return dst, err
	}
	for _, ip := range ips {
		dst = append(dst, netip.AddrPortFrom(ip.Unmap().WithZone(""), uint16(port)))
	}
	return dst, nil
}

// lookupSRV resolves name's SRV records and each target's addresses, srvParallel
// targets at a time. Priority and weight are ignored: every target is a peer.
func (r *Resolver) lookupSRV(ctx context.Context, name string) ([]netip.AddrPort, error) {
	_, srvs, err := r.r.LookupSRV(ctx, "", "", name)
	if err != nil {
		return nil, err
	}
	type key struct {
		target string
		port   uint16
	}
	var targets []key
	for _, s := range srvs {
		if s.Target != "." { // RFC 2782: "decidedly not available"
			targets = append(targets, key{s.Target, s.Port})
		}
	}
	slices.SortFunc(targets, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.target, b.target), cmp.Compare(a.port, b.port))
	})
	targets = slices.Compact(targets)

	results := make([][]netip.AddrPort, len(targets))
	errs := make([]error, len(targets))
	var next atomic.Int64 // the index of the next target to resolve
	var wg sync.WaitGroup
	for range min(srvParallel, len(targets)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(targets); i = int(next.Add(1) - 1) {
				results[i], errs[i] = r.lookupAddrs(ctx, targets[i].target, int(targets[i].port), nil)
			}
		})
	}
	wg.Wait()
	var addrs []netip.AddrPort
	for i := range targets {
		if err := errs[i]; err != nil && !isNotFound(err) {
			return nil, err
		}
		addrs = append(addrs, results[i]...)
	}
	return addrs, nil
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// classify wraps a resolver error in ErrTimeout or ErrNoRecords, if it is one. It
// also names the server asked: Go's resolver names the first of /etc/resolv.conf,
// even when Dial sent the query elsewhere.
func (r *Resolver) classify(err error) error {
	if de, ok := err.(*net.DNSError); ok && r.server != "" {
		c := *de
		c.Server = r.server
		err = &c
	}
	var de *net.DNSError
	switch {
	case errors.As(err, &de) && de.IsTimeout, errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	case isNotFound(err):
		return fmt.Errorf("%w: %w", ErrNoRecords, err)
	}
	return fmt.Errorf("discovery: %w", err)
}
