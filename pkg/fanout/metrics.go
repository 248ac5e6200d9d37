package fanout

import (
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes the node's counters and gauges to Prometheus. It reads the
// batchers' Stats at scrape time, so the hot path pays nothing for metrics.
type Collector struct {
	node       *Node
	events     *prometheus.Desc
	queue      *prometheus.Desc
	breaker    *prometheus.Desc
	state      *prometheus.Desc
	stateOps   *prometheus.Desc
	subs       *prometheus.Desc
	delivered  *prometheus.Desc
	peersTotal *prometheus.Desc
	syncRounds *prometheus.Desc
	syncKeys   *prometheus.Desc
	syncBytes  *prometheus.Desc
	syncLast   *prometheus.Desc
	syncDur    *prometheus.Desc
	ready      *prometheus.Desc
	disk       *prometheus.Desc
	diskLag    *prometheus.Desc
	diskCommit *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for n; register it on the caller's registry.
func NewCollector(n *Node) *Collector {
	peer := []string{"peer"}
	return &Collector{
		node: n,
		events: prometheus.NewDesc("fanout_peer_events_total",
			"Events per peer batcher by what happened to them (SPEC §4 counters).", []string{"peer", "kind"}, nil),
		queue: prometheus.NewDesc("fanout_peer_queue_events",
			"Events per peer batcher by where they wait (SPEC §4 gauges); idle_workers counts workers.", []string{"peer", "queue"}, nil),
		breaker: prometheus.NewDesc("fanout_peer_breaker_state",
			"1 for the peer's current circuit-breaker state.", []string{"peer", "state"}, nil),
		state: prometheus.NewDesc("fanout_state",
			"The state table: keys and bytes (tombstones included) against their bounds, tombstones, the latest and the compacted revision.", []string{"gauge"}, nil),
		stateOps: prometheus.NewDesc("fanout_state_writes_total",
			"Writes the state table did not apply (refused at a bound, stale), and tombstones collected.", []string{"kind"}, nil),
		subs:       prometheus.NewDesc("fanout_subscribers", "Open Subscribe streams.", nil, nil),
		delivered:  prometheus.NewDesc("fanout_delivered_events_total", "Events sent on Subscribe streams.", nil, nil),
		peersTotal: prometheus.NewDesc("fanout_peers", "Peers this node replicates to.", peer, nil),
		syncRounds: prometheus.NewDesc("fanout_sync_rounds_total",
			"Anti-entropy rounds this node called, by result: in_sync, repaired, failed.", []string{"peer", "result"}, nil),
		syncKeys: prometheus.NewDesc("fanout_sync_keys_repaired_total",
			"Entries anti-entropy stored: pulled (from the peer, here) and pushed (from here, at the peer).", []string{"peer", "direction"}, nil),
		syncBytes: prometheus.NewDesc("fanout_sync_bytes_total",
			"Bytes of anti-entropy rounds (protobuf sizes): digest (the hash tree walk) and all.", []string{"peer", "kind"}, nil),
		syncLast: prometheus.NewDesc("fanout_sync_last_success_timestamp_seconds",
			"When the last anti-entropy round with the peer that completed ended.", peer, nil),
		syncDur: prometheus.NewDesc("fanout_sync_last_duration_seconds",
			"How long the last completed anti-entropy round with the peer took.", peer, nil),
		ready: prometheus.NewDesc("fanout_ready",
			"1 when the named health service fanout.v1.FanoutService is SERVING (bootstrap ended, not draining).", nil, nil),
		disk: prometheus.NewDesc("fanout_data_dir_total",
			"With --data-dir: commits (each one fsync), records written, tombstones deleted, failed commits.", []string{"kind"}, nil),
		diskLag: prometheus.NewDesc("fanout_data_dir_lag_revisions",
			"With --data-dir: state table revisions not yet on disk (0 when idle; growing: the disk is slower than the writes, or failing).", nil, nil),
		diskCommit: prometheus.NewDesc("fanout_data_dir_last_commit_seconds",
			"With --data-dir: how long the last commit took, its fsync included.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.events, c.queue, c.breaker, c.state, c.stateOps, c.subs, c.delivered, c.peersTotal,
		c.syncRounds, c.syncKeys, c.syncBytes, c.syncLast, c.syncDur, c.ready, c.disk, c.diskLag, c.diskCommit} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range *c.node.links.Load() {
		st := l.b.Stats()
		for _, kv := range counters(st) {
			ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(kv.v), l.addr, kv.k)
		}
		for _, kv := range gauges(st) {
			ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, float64(kv.v), l.addr, kv.k)
		}
		ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, 1, l.addr, l.br.State().String())
		ch <- prometheus.MustNewConstMetric(c.peersTotal, prometheus.GaugeValue, 1, l.addr)
		c.collectSync(ch, l)
	}
	ready := 0.0
	if ok, _ := c.node.Readiness(); ok {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, ready)
	st, bounds := c.node.table.Stats(), c.node.cfg.State
	for _, g := range []kv{
		{"keys", uint64(st.Keys)}, {"max_keys", uint64(bounds.MaxKeys)},
		{"bytes", uint64(st.Bytes)}, {"max_bytes", uint64(bounds.MaxBytes)},
		{"arena_bytes", uint64(st.ArenaBytes)}, {"tombstones", uint64(st.Tombstones)},
		{"revision", st.Revision}, {"compacted_revision", st.Compacted},
	} {
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, float64(g.v), g.k)
	}
	for _, k := range []kv{{"refused", st.Refused}, {"stale", st.StaleSeen}, {"collected", st.Collected}} {
		ch <- prometheus.MustNewConstMetric(c.stateOps, prometheus.CounterValue, float64(k.v), k.k)
	}
	if p := c.node.persist; p != nil {
		ps := p.stats()
		for _, k := range []kv{{"commits", ps.Commits}, {"records", ps.Records}, {"deletes", ps.Deletes}, {"failures", ps.Failures}} {
			ch <- prometheus.MustNewConstMetric(c.disk, prometheus.CounterValue, float64(k.v), k.k)
		}
		ch <- prometheus.MustNewConstMetric(c.diskLag, prometheus.GaugeValue, float64(ps.Latest-min(ps.Latest, ps.Durable)))
		ch <- prometheus.MustNewConstMetric(c.diskCommit, prometheus.GaugeValue, ps.LastCommit.Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.subs, prometheus.GaugeValue, float64(c.node.subscribers.Load()))
	ch <- prometheus.MustNewConstMetric(c.delivered, prometheus.CounterValue, float64(c.node.delivered.Load()))
}

type kv struct {
	k string
	v uint64
}

func counters(s batcher.Stats) []kv {
	return []kv{
		{"accepted", s.Accepted}, {"overridden", s.Overridden}, {"overflow", s.Overflow},
		{"expired", s.Expired}, {"replayed", s.Replayed}, {"succeeded", s.Succeeded},
		{"congestion", s.Congestion}, {"transient", s.Transient}, {"permanent", s.Permanent},
		{"stale", s.Stale},
	}
}

func gauges(s batcher.Stats) []kv {
	return []kv{
		{"acceptor", s.AcceptorQueue}, {"reprocess", s.ReprocessQueue}, {"pending", s.Pending},
		{"in_flight", s.InFlight}, {"idle_workers", s.IdleWorkers},
	}
}

func (c *Collector) collectSync(ch chan<- prometheus.Metric, l *link) {
	s := &l.sync
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range []kv{{"in_sync", s.inSync}, {"repaired", s.repaired}, {"failed", s.errs}} {
		ch <- prometheus.MustNewConstMetric(c.syncRounds, prometheus.CounterValue, float64(k.v), l.addr, k.k)
	}
	ch <- prometheus.MustNewConstMetric(c.syncKeys, prometheus.CounterValue, float64(s.pulled), l.addr, "pulled")
	ch <- prometheus.MustNewConstMetric(c.syncKeys, prometheus.CounterValue, float64(s.pushed), l.addr, "pushed")
	ch <- prometheus.MustNewConstMetric(c.syncBytes, prometheus.CounterValue, float64(s.digestBytes), l.addr, "digest")
	ch <- prometheus.MustNewConstMetric(c.syncBytes, prometheus.CounterValue, float64(s.bytes), l.addr, "all")
	if !s.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.syncLast, prometheus.GaugeValue, float64(s.lastSuccess.UnixNano())/1e9, l.addr)
		ch <- prometheus.MustNewConstMetric(c.syncDur, prometheus.GaugeValue, s.lastDuration.Seconds(), l.addr)
	}
}
