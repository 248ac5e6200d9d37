package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/pkg/discovery"
	"github.com/fanout/fanout/pkg/refresh"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

// DNS discovery (SPEC §8, issue 11): --peers-dns names a headless Service (A/AAAA)
// or an SRV record; the peer set is the static --peers plus what it resolves to,
// minus this node, refreshed on seed 001's supervised schedule (pkg/refresh). A
// lookup that fails keeps the last good set: a DNS hiccup never empties the mesh.

// discoveryOptions are the flags of DNS discovery.
type discoveryOptions struct {
	peersDNS  string
	refresh   time.Duration
	dnsServer string
	maxPeers  int
}

// defaultMaxPeers caps the peers DNS may name: every peer costs its batcher's
// goroutines (1 + --workers), a connection and its share of --max-pending-bytes, so a
// name that answers thousands of addresses must not become thousands of peers. 256
// is more replicas than a full mesh of sidecars is meant for.
const defaultMaxPeers = 256

func defaultDiscoveryOptions() discoveryOptions {
	return discoveryOptions{refresh: 30 * time.Second, maxPeers: defaultMaxPeers}
}

func (o *discoveryOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.peersDNS, "peers-dns", o.peersDNS, "find peers in DNS: name:port for the A/AAAA records of a headless Service "+
		"(e.g. fanout-peers.default.svc.cluster.local:7071), or an SRV name starting with _ (e.g. _peer._tcp.fanout-peers.default.svc.cluster.local); "+
		"combined with --peers; this node's own address is left out")
	fs.DurationVar(&o.refresh, "peers-refresh", o.refresh, "look --peers-dns up again this often; a lookup that times out doubles the wait, up to 10x, and a success "+
		"resets it (Eureka's TimedSupervisorTask); a failed lookup keeps the peers found last (a peer calling that is not known also triggers a lookup at once)")
	fs.StringVar(&o.dnsServer, "dns-server", o.dnsServer, "ask this DNS server (ip:port, or an ip for port 53) instead of the system's resolver (/etc/resolv.conf)")
	fs.IntVar(&o.maxPeers, "max-peers", o.maxPeers, "take at most this many peers from --peers-dns (the static --peers are not counted); more addresses are "+
		"refused with a WARN and counted in fanout_peers_dns_refused_addresses, the peers already in the set kept first: every peer costs "+
		"goroutines, a connection and memory")
}

// discoverer keeps the peer set of one node: the static list plus the addresses its
// DNS target resolves to. Made before the node (its first lookup seeds the node's
// bootstrap), started after.
type discoverer struct {
	target   discovery.Target
	resolver *discovery.Resolver
	static   []string
	listen   string // --peer-addr, to leave this node's own address out
	maxPeers int    // --max-peers: the most addresses taken from a lookup
	interval time.Duration
	cfg      refresh.Config
	log      *slog.Logger

	mu      sync.Mutex
	found   []string // the last good lookup, this node left out, capped at maxPeers; guarded by mu
	refused int      // addresses the last good lookup found past maxPeers; guarded by mu

	task atomic.Pointer[refresh.Task] // nil until start
}

// newDiscoverer checks the flags; it returns nil without --peers-dns.
func (o discoveryOptions) newDiscoverer(static []string, listen string, log *slog.Logger) (*discoverer, error) {
	if o.peersDNS == "" {
		if o.dnsServer != "" {
			return nil, errors.New("--dns-server: set without --peers-dns, so nothing would ask it; add --peers-dns or drop --dns-server")
		}
		return nil, nil
	}
	target, err := discovery.Parse(o.peersDNS)
	if err != nil {
		return nil, err
	}
	if err := o.refreshConfig(log).Validate(); err != nil {
		return nil, forFlags(err)
	}
	if o.maxPeers <= 0 {
		return nil, fmt.Errorf("--max-peers: must be > 0, got %d", o.maxPeers)
	}
	rc := discovery.DefaultConfig()
	rc.Server = o.dnsServer
	// A lookup may take its whole timeout, but never longer than the refresh period:
	// a refresh every second must not be held up by a 10s lookup.
	rc.Timeout = min(rc.Timeout, o.refresh)
	r, err := discovery.NewResolver(rc)
	if err != nil {
		return nil, forFlags(err)
	}
	d := &discoverer{target: target, resolver: r, static: static, listen: listen, interval: o.refresh, maxPeers: o.maxPeers}
	d.cfg = o.refreshConfig(log.With("component", "discovery", "peers_dns", target.String()))
	d.log = d.cfg.Logger
	return d, nil
}

// refreshConfig is the supervised schedule of the lookups: every --peers-refresh,
// doubled by each timeout up to 10x (refresh's defaults, seed 001's rule).
func (o discoveryOptions) refreshConfig(log *slog.Logger) refresh.Config {
	cfg := refresh.DefaultConfig()
	cfg.Name = "peers-dns"
	cfg.Interval = o.refresh
	cfg.Logger = log
	return cfg
}

// lookup resolves the target, leaves this node out and caps the rest at
// --max-peers (capPeers), recording and logging what it refused.
func (d *discoverer) lookup(ctx context.Context) ([]string, error) {
	addrs, err := d.resolver.Lookup(ctx, d.target)
	if err != nil {
		return nil, err
	}
	addrs = slices.DeleteFunc(addrs, func(a string) bool { return discovery.IsSelf(a, d.listen) })
	d.mu.Lock()
	kept, refused := capPeers(addrs, d.found, d.maxPeers)
	changed := refused != d.refused
	d.refused = refused
	d.mu.Unlock()
	if refused > 0 && changed {
		d.log.Warn("DNS names more peers than --max-peers; the extra addresses are refused", "found", len(addrs),
			"max_peers", d.maxPeers, "refused", refused, "what_to_do", "raise --max-peers, or check what the DNS name answers")
	}
	return kept, nil
}

// capPeers keeps at most max of addrs: those already in cur first, so that a new
// address never displaces a peer, then the others in addrs' order. It returns them
// in addrs' order, and how many it refused.
func capPeers(addrs, cur []string, max int) ([]string, int) {
	if len(addrs) <= max {
		return addrs, 0
	}
	keep := make(map[string]bool, max)
	for _, a := range cur {
		if len(keep) < max && slices.Contains(addrs, a) {
			keep[a] = true
		}
	}
	for _, a := range addrs {
		if len(keep) < max {
			keep[a] = true
		}
	}
	kept := slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return !keep[a] })
	return kept, len(addrs) - len(kept)
}

// initial runs the first lookup before the node starts, so that its bootstrap syncs
// with the peers DNS names; it returns the peer set to start with. A failure is
// logged and the node starts with the static peers; the refresh tries again.
func (d *discoverer) initial(ctx context.Context) []string {
	found, err := d.lookup(ctx)
	if err != nil {
		d.log.Warn("first DNS lookup failed; starting with the static peers, the refresh tries again", "err", err.Error(),
			"static", d.static, "retry_in", d.interval.String())
		return d.static
	}
	d.mu.Lock()
	d.found = found
	d.mu.Unlock()
	d.log.Info("peers found in DNS", "found", found)
	return d.union(found)
}

func (d *discoverer) union(found []string) []string {
	out := slices.Clone(d.static)
	for _, a := range found {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// start runs the supervised refresh, applying each good lookup with set, until stop.
// Its first lookup runs at once: the peers may have changed while the node started.
func (d *discoverer) start(set func([]string) error) error {
	t, err := refresh.Start(context.Background(), d.cfg, func(ctx context.Context) error {
		found, err := d.lookup(ctx)
		if err != nil {
			d.log.Warn("DNS lookup failed; keeping the peers found last", "err", err.Error(), "timeout", refresh.IsTimeout(err))
			return err
		}
		d.mu.Lock()
		changed := !slices.Equal(found, d.found)
		d.found = found
		d.mu.Unlock()
		if changed {
			d.log.Info("peers in DNS changed", "found", found)
		}
		return set(d.union(found))
	})
	if err != nil {
		return err
	}
	d.task.Store(t)
	return nil
}

// trigger asks for a lookup now (a peer not in the set called); safe before start.
func (d *discoverer) trigger() {
	if t := d.task.Load(); t != nil {
		t.Trigger()
	}
}

func (d *discoverer) stop() {
	if t := d.task.Load(); t != nil {
		t.Stop()
	}
}

// discoveryCollector exports the refresh's state on /metrics.
type discoveryCollector struct {
	d                                            *discoverer
	lookups, interval, lastSuccess, num, refused *prometheus.Desc
}

func newDiscoveryCollector(d *discoverer) *discoveryCollector {
	return &discoveryCollector{d: d,
		lookups: prometheus.NewDesc("fanout_peers_dns_lookups_total",
			"DNS lookups of --peers-dns, by outcome: success, timeout (the wait doubles, up to 10x --peers-refresh), failure (the peers found last are kept).",
			[]string{"outcome"}, nil),
		interval: prometheus.NewDesc("fanout_peers_dns_refresh_interval_seconds",
			"The wait between lookups now: --peers-refresh, doubled by each timeout since the last success.", nil, nil),
		lastSuccess: prometheus.NewDesc("fanout_peers_dns_last_success_timestamp_seconds",
			"When the last successful lookup ended (0: none yet since the start).", nil, nil),
		num: prometheus.NewDesc("fanout_peers_dns_addresses",
			"Peer addresses the last successful lookup found, this node left out, at most --max-peers.", nil, nil),
		refused: prometheus.NewDesc("fanout_peers_dns_refused_addresses",
			"Addresses the last successful lookup found past --max-peers, refused (not peers).", nil, nil),
	}
}

func (c *discoveryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lookups
	ch <- c.interval
	ch <- c.lastSuccess
	ch <- c.num
	ch <- c.refused
}

func (c *discoveryCollector) Collect(ch chan<- prometheus.Metric) {
	var st refresh.Stats
	if t := c.d.task.Load(); t != nil {
		st = t.Stats()
	} else {
		st.Interval = c.d.interval
	}
	ch <- prometheus.MustNewConstMetric(c.lookups, prometheus.CounterValue, float64(st.Successes), "success")
	ch <- prometheus.MustNewConstMetric(c.lookups, prometheus.CounterValue, float64(st.Timeouts), "timeout")
	ch <- prometheus.MustNewConstMetric(c.lookups, prometheus.CounterValue, float64(st.Failures), "failure")
	ch <- prometheus.MustNewConstMetric(c.interval, prometheus.GaugeValue, st.Interval.Seconds())
	last := 0.0
	if !st.LastSuccess.IsZero() {
		last = float64(st.LastSuccess.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, last)
	c.d.mu.Lock()
	n, refused := len(c.d.found), c.d.refused
	c.d.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.num, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, float64(refused))
}
