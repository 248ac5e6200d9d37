package discovery

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Target is a parsed --peers-dns value: the DNS name whose records list the peers.
type Target struct {
	// Name is the DNS name as given. Without a trailing dot the resolver's search
	// list applies, as Kubernetes' short names ("fanout-peers:7000") need.
	Name string
	// SRV says the name's SRV records list the peers, each with its port (the name
	// starts with "_"). Otherwise its A and AAAA records do, all on Port.
	SRV bool
	// Port is the peers' port for A and AAAA records; 0 for SRV.
	Port int
}

// String gives the target back in --peers-dns form.
func (t Target) String() string {
	if t.SRV {
		return t.Name
	}
	return net.JoinHostPort(t.Name, strconv.Itoa(t.Port))
}

// Parse parses a --peers-dns value:
//
//   - name:port, the A and AAAA records of name with one port for all, e.g. a
//     Kubernetes headless Service, fanout-peers.default.svc.cluster.local:7000;
//   - _service._proto.name, the SRV records of the name, each with its target
//     and port, e.g. _peer._tcp.fanout-peers.default.svc.cluster.local. It takes
//     no port: the records carry them.
//
// Its errors name the flag and say what to give instead.
func Parse(s string) (Target, error) {
	bad := func(format string, args ...any) (Target, error) {
		return Target{}, fmt.Errorf("--peers-dns %q: "+format, append([]any{s}, args...)...)
	}
	switch {
	case s == "":
		return bad("empty: give name:port (the A/AAAA records of a headless Service) or an SRV name starting with \"_\"")
	case strings.HasPrefix(s, "_"):
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			return bad("an SRV name (it starts with \"_\") takes no port, its records carry the ports: drop %q", s[i:])
		}
		if err := checkName(s); err != nil {
			return bad("%v", err)
		}
		return Target{Name: s, SRV: true}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if !strings.Contains(s, ":") {
			return bad("no port: give name:port, e.g. %s:7000, or an SRV name starting with \"_\"", s)
		}
		return bad("give name:port: %v", err)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return bad("%s is an IP address, not a DNS name: list fixed peers with --peers instead", host)
	}
	if err := checkName(host); err != nil {
		return bad("%v", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 || port[0] == '+' {
		return bad("port %q is not a number in 1..65535", port)
	}
	return Target{Name: host, Port: p}, nil
}

// checkName checks that name is a DNS name a resolver accepts: at most 253 bytes
// (and a trailing dot), labels of 1 to 63 letters, digits, '-' or '_'.
func checkName(name string) error {
	n := strings.TrimSuffix(name, ".")
	if n == "" {
		return fmt.Errorf("no DNS name")
	}
	if len(n) > 253 {
		return fmt.Errorf("the name is %d bytes long, DNS allows 253", len(n))
	}
	for label := range strings.SplitSeq(n, ".") {
		if label == "" {
			return fmt.Errorf("%q has an empty label (\"..\", or a leading dot)", name)
		}
		if len(label) > 63 {
			return fmt.Errorf("label %q is %d bytes long, DNS allows 63", label, len(label))
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q has %q: a DNS name has letters, digits, '-', '_' and dots", name, c)
			}
		}
	}
	return nil
}
