/*
Package discovery finds the peers of a node in DNS (--peers-dns): it parses
the target, looks it up, and tells the node's own address apart. It keeps no state and
starts no goroutine of its own; the node re-runs Lookup on refresh's supervised
schedule (seed 001) and diffs the answers against its peers.

# Targets

	t, err := discovery.Parse("fanout-peers.default.svc.cluster.local:7000")
	t, err := discovery.Parse("_peer._tcp.fanout-peers.default.svc.cluster.local")

A name:port target lists the A and AAAA records of name, every peer on port: a
Kubernetes headless Service answers with the IP of each ready pod. A name that starts
with "_" lists its SRV records instead, each target resolved to its A and AAAA
records with the record's own port: for peers whose ports differ, as several nodes on
one host do (the end-to-end tests), or a Service's named port
(_<port-name>._tcp.<service>.<namespace>.svc.cluster.local). An SRV name takes no
port, as its records carry them; priority and weight are ignored, since a node sends
to every peer. A name without a trailing dot goes through the resolver's search
list, so a short Service name works inside its namespace.

# Lookup

	r, err := discovery.NewResolver(discovery.Config{Server: "10.96.0.10:53", Timeout: 10 * time.Second})
	addrs, err := r.Lookup(ctx, t) // ["10.0.0.2:7000", "10.0.0.10:7000", "[fd00::1]:7000"]

Config.Server (--dns-server) sends every query to one server, over UDP and over TCP
when an answer is truncated (past about 70 IPv4 or 40 IPv6 pods); empty asks the
system's resolver. The addresses come back sorted (by IP, numerically, IPv4 first,
then port) and without duplicates, so two answers compare with slices.Equal.

The errors say what the node should do, which is why Lookup sorts them out:

  - errors.Is(err, ErrTimeout): the server did not answer within Config.Timeout.
    Keep the peers; refresh.IsTimeout says true, so the refresh doubles its
    interval and stops adding load to a struggling server.
  - errors.Is(err, ErrNoRecords): DNS answered that the name has no addresses
    (NXDOMAIN, no records, or SRV targets that all lack addresses). That is an
    answer, not an outage: a headless Service with no ready pod. It is also what
    a misspelt name gives, so log it.
  - anything else (connection refused, SERVFAIL, a cancelled ctx): keep the peers
    and try again at the usual interval.

A lookup never half-succeeds: an SRV lookup in which any target times out or fails
fails whole, so that a slow answer never makes live peers look removed. Only an SRV
target without addresses is left out (its pod is gone, its record not yet).

# Self

DNS lists the node's own pod with the others. IsSelf(addr, listenAddr) drops it:
same port, and the listen IP, or with a wildcard listener (":7000") any IP of the
host's interfaces.
*/
package discovery
