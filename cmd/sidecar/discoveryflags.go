package main

import (
	"github.com/fanout/fanout/pkg/sidecar"
	"github.com/spf13/pflag"
)

// addDiscoveryFlags registers the flags of DNS discovery (pkg/sidecar runs it).
func addDiscoveryFlags(fs *pflag.FlagSet, c *sidecar.DiscoveryConfig) {
	fs.StringVar(&c.PeersDNS, "peers-dns", c.PeersDNS, "find peers in DNS: name:port for the A/AAAA records of a headless Service "+
		"(e.g. fanout-peers.default.svc.cluster.local:7071), or an SRV name starting with _ (e.g. _peer._tcp.fanout-peers.default.svc.cluster.local); "+
		"combined with --peers; this node's own address is left out")
	fs.DurationVar(&c.Refresh, "peers-refresh", c.Refresh, "look --peers-dns up again this often; a lookup that times out doubles the wait, up to 10x, and a success "+
		"resets it (Eureka's TimedSupervisorTask); a failed lookup keeps the peers found last (a peer calling that is not known also triggers a lookup at once)")
	fs.StringVar(&c.DNSServer, "dns-server", c.DNSServer, "ask this DNS server (ip:port, or an ip for port 53) instead of the system's resolver (/etc/resolv.conf)")
	fs.IntVar(&c.MaxPeers, "max-peers", c.MaxPeers, "take at most this many peers from --peers-dns (the static --peers are not counted); more addresses are "+
		"refused with a WARN and counted in fanout_peers_dns_refused_addresses, the peers already in the set kept first: every peer costs "+
		"goroutines, a connection and memory")
}
