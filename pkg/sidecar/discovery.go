package sidecar

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/pkg/discovery"
	"github.com/fanout/fanout/pkg/refresh"
	"github.com/prometheus/client_golang/prometheus"
)

// DNS discovery: DiscoveryConfig.PeersDNS names a headless Service (A/AAAA) or an
// SRV record; the peer set is the static peers plus what it resolves to, minus this
// node, refreshed on a supervised schedule (pkg/refresh: a lookup that times out
// doubles the wait). A lookup that fails keeps the last good set: a DNS hiccup never
// empties the mesh.

// discoverer keeps the peer set of one node: the static list plus the addresses its
// DNS target resolves to. Made before the node (its first lookup seeds the node's
// bootstrap), started after.
type discoverer struct {
	target   discovery.Target
	resolver *discovery.Resolver
	static   []string
	listen   string // Config.PeerAddr, to leave this node's own address out
	maxPeers int    // DiscoveryConfig.MaxPeers: the most addresses taken from a lookup
	interval time.Duration
	cfg      refresh.Config
	log      *slog.Logger

	mu      sync.Mutex
	found   []string // the last good lookup, this node left out, capped at maxPeers; guarded by mu
	refused int      // addresses the last good lookup found past maxPeers; guarded by mu

	task atomic.Pointer[refresh.Task] // nil until start
}

// newDiscoverer makes the discoverer of c.PeersDNS; nil without one. Start has
// validated c's own fields; refresh and discovery check theirs here.
func newDiscoverer(c DiscoveryConfig, static []string, listen string, log *slog.Logger) (*discoverer, error) {
	if c.PeersDNS == "" {
		return nil, nil
	}
	target, err := discovery.Parse(c.PeersDNS)
	if err != nil {
		return nil, err
	}
	if err := refreshConfig(c, log).Validate(); err != nil {
		return nil, err
	}
	rc := discovery.DefaultConfig()
	rc.Server = c.DNSServer
	// A lookup may take its whole timeout, but never longer than the refresh period:
	// a refresh every second must not be held up by a 10s lookup.
	rc.Timeout = min(rc.Timeout, c.Refresh)
	r, err := discovery.NewResolver(rc)
	if err != nil {
		return nil, err
	}
	d := &discoverer{target: target, resolver: r, static: static, listen: listen, interval: c.Refresh, maxPeers: c.MaxPeers}
	d.cfg = refreshConfig(c, log.With("component", "discovery", "peers_dns", target.String()))
	d.log = d.cfg.Logger
	return d, nil
}

// refreshConfig is the supervised schedule of the lookups: every c.Refresh, doubled
// by each timeout up to 10x (refresh's defaults).
func refreshConfig(c DiscoveryConfig, log *slog.Logger) refresh.Config {
	cfg := refresh.DefaultConfig()
	cfg.Name = "peers-dns"
	cfg.Interval = c.Refresh
	cfg.Logger = log
	return cfg
}

// lookup resolves the target, leaves this node out and caps the rest at
// DiscoveryConfig.MaxPeers (capPeers), recording and logging what it refused.
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
