package discovery

import (
	"net"
	"net/netip"
	"strconv"
)

// IsSelf reports whether addr, an ip:port as Lookup returns it, is this node's own
// listener at listenAddr (its peer listener, host:port). DNS discovery lists the
// node's own pod among the peers, and a node must not replicate to itself.
//
// The ports must be equal. Then, if listenAddr's host is an IP address, addr's IP
// must be that one: a node bound to one address is not reachable at another of its
// host's addresses on that port. If the host is empty, unspecified (0.0.0.0, ::) or a
// name, addr's IP must be one of the host's interface addresses, loopback included:
// in Kubernetes the pod's IP, which its headless Service lists.
//
// A node that advertises an address other than its listener (behind NAT) asks twice:
// IsSelf(addr, listen) || IsSelf(addr, advertised). An unparsable addr or
// listenAddr is not this node. IsSelf reads the interface addresses on every call
// that needs them (one netlink query on Linux): call it once per address per refresh,
// not per message.
func IsSelf(addr, listenAddr string) bool {
	return isSelf(addr, listenAddr, interfaceIPs)
}

// isSelf is IsSelf with the host's addresses from local.
func isSelf(addr, listenAddr string, local func() []netip.Addr) bool {
	a, err := netip.ParseAddrPort(addr)
	if err != nil {
		return false
	}
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return false
	}
	if p, err := strconv.Atoi(port); err != nil || p != int(a.Port()) {
		return false
	}
	ip := a.Addr().Unmap().WithZone("")
	if l, err := netip.ParseAddr(host); err == nil && !l.IsUnspecified() {
		return l.Unmap().WithZone("") == ip
	}
	for _, l := range local() {
		if l == ip {
			return true
		}
	}
	return false
}

// interfaceIPs returns the IP addresses of the host's interfaces, unmapped and
// without zones; none if they cannot be read.
func interfaceIPs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var ips []netip.Addr
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if x, ok := netip.AddrFromSlice(ip); ok {
			ips = append(ips, x.Unmap().WithZone(""))
		}
	}
	return ips
}
