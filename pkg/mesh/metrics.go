package mesh

import (
	"github.com/fanout/fanout/internal/promhist"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/prometheus/client_golang/prometheus"
)

// The mesh's series on /metrics, exported through the node's Collector (the mesh is
// its transport: fanout.Transport's Describe and Collect). Every per-peer series is
// labelled peer (the address in --peers) and peer_id (the peer's node id, "" until its
// first answer); a removed link's series go with it. They are read at scrape time
// (the batchers' Stats, the links' histograms and counters), so the hot path pays only
// for an atomic add or a lock-free Observe.

type descs struct {
	peers, up, events, queue, pendingBytes, idle, breaker, rtt, conflict, setChanges, removedDropped *prometheus.Desc
	syncRounds, syncKeys, syncBytes, syncLast, syncDur                                               *prometheus.Desc
	syncLimited, syncTimeouts, bootstrap                                                             *prometheus.Desc
	budget                                                                                           budgetDescs // budget.go
}

func newDescs() descs {
	peer := []string{"peer", "peer_id"}
	with := func(l ...string) []string { return append(append([]string(nil), peer...), l...) }
	g := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return descs{budget: newBudgetDescs(),
		peers: g("fanout_peers", "1 per peer in this node's peer set; 0 for a peer that left it (DNS no longer names it) and is still sent "+
			"what it had pending, for up to --peer-removal-grace. peer_id is its node id once it has answered.", peer...),
		up: g("fanout_peer_up",
			"1 while the peer answers: 0 from a call to it that could not reach it (a network failure, its breaker open) until one "+
				"is answered again. A peer not called yet is up.", peer...),
		conflict: g("fanout_peer_node_id_conflict",
			"1 when the peer's node id clashes: it answers with this node's own id from another process (its events fail as permanent errors), "+
				"or another peer answers with the same id. GetStatus says which. Give every node its own --node-id.", peer...),
		setChanges: g("fanout_peer_set_changes_total",
			"Changes of the peer set (static --peers and DNS discovery): added, removed (left the set), returned (named again within "+
				"--peer-removal-grace, nothing dropped).", "change"),
		removedDropped: g("fanout_peer_removed_dropped_events_total",
			"Events still pending for peers removed from the set when their --peer-removal-grace ended: dropped (DROPPED \"peer removed\" "+
				"to ack waiters; a peer that comes back gets them by anti-entropy)."),
		events: g("fanout_peer_events_total",
			"Events queued for a peer, by what happened to them: accepted (queued), overridden (replaced by a newer event "+
				"of the same task_id before it was sent), overflow (evicted from a full queue, --max-buffer), expired (past "+
				"its ttl), replayed (sent again after a failed call), succeeded (the peer answered OK), congestion, "+
				"transient and permanent (in a call that failed so), stale (the peer held newer), too_large (the peer "+
				"refused it, alone, as bigger than it accepts).", with("kind")...),
		queue: g("fanout_peer_queue_events",
			"Events waiting for a peer, by queue: acceptor (handed over, not yet sorted), reprocess (to retry), "+
				"pending (waiting for a worker), in_flight (in a Replicate call).", with("queue")...),
		pendingBytes: g("fanout_peer_pending_bytes",
			"Bytes of the events pending for a peer (encoded, as sent), bounded by --max-buffer-bytes.", peer...),
		idle:    g("fanout_peer_idle_workers", "Workers of a peer's batcher not in a Replicate call (of --workers).", peer...),
		breaker: g("fanout_peer_breaker_state", "1 for the peer's current circuit-breaker state: closed, open or half-open.", with("state")...),
		rtt: g("fanout_peer_replicate_duration_seconds",
			"Duration of each Replicate call to the peer, answered or failed (a call past --replicate-timeout fails).", peer...),
		syncRounds: g("fanout_sync_rounds_total",
			"Anti-entropy rounds this node called, by result: in_sync, repaired, failed.", with("result")...),
		syncKeys: g("fanout_sync_keys_repaired_total",
			"Entries anti-entropy stored: pulled (from the peer, here) and pushed (from here, at the peer).", with("direction")...),
		syncBytes: g("fanout_sync_bytes_total",
			"Bytes of anti-entropy rounds (protobuf sizes): digest (the hash tree walk) and all.", with("kind")...),
		syncLast: g("fanout_sync_last_success_timestamp_seconds",
			"When the last anti-entropy round with the peer that completed ended.", peer...),
		syncDur: g("fanout_sync_last_duration_seconds", "How long the last completed anti-entropy round with the peer took.", peer...),
		syncLimited: g("fanout_sync_push_limited_total",
			"Anti-entropy rounds in which the peer asked for more than a round pushes, by what it got: cut (the first 10,000 entries "+
				"or 4 MiB) or held (nothing: it asked for too much in a recent round, and waits out a hold of 1m, doubling to 16m).", with("reason")...),
		bootstrap: g("fanout_bootstrap_peers",
			"The peers of this node's bootstrap (its first sync, at start), by how its round with each ended: synced, unreachable "+
				"(not waited for: the node turns ready without them), failed (an error, or cut short by --sync-timeout).", "result"),
		syncTimeouts: g("fanout_sync_call_timeouts_total",
			"Anti-entropy calls to the peer that passed their deadline, by call: digest, pull (silent for --replicate-timeout, "+
				"or not ended within 1m), push. The round fails; the rounds with the other peers go on.", with("call")...),
	}
}

var _ prometheus.Collector = (*Mesh)(nil)

// Describe implements prometheus.Collector.
func (m *Mesh) Describe(ch chan<- *prometheus.Desc) {
	d := &m.d
	for _, x := range []*prometheus.Desc{d.peers, d.up, d.conflict, d.setChanges, d.removedDropped, d.events, d.queue, d.pendingBytes, d.idle, d.breaker, d.rtt,
		d.syncRounds, d.syncKeys, d.syncBytes, d.syncLast, d.syncDur} {
		ch <- x
	}
	ch <- d.syncLimited
	ch <- d.syncTimeouts
	ch <- d.bootstrap
	d.budget.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Mesh) Collect(ch chan<- prometheus.Metric) {
	d := &m.d
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	synced, unreachable, failed := m.readiness.counts()
	gauge(d.bootstrap, float64(synced), "synced")
	gauge(d.bootstrap, float64(unreachable), "unreachable")
	gauge(d.bootstrap, float64(failed), "failed")
	for _, l := range m.allLinks() {
		addr, id := l.addr, l.peerNodeID()
		st := l.b.Stats()
		gauge(d.peers, boolGauge(!l.removing.Load()), addr, id)
		up, _ := l.state.get()
		gauge(d.up, boolGauge(up), addr, id)
		gauge(d.conflict, boolGauge(l.conflict.Load() != nil), addr, id)
		for _, kv := range counters(st) {
			counter(d.events, kv.v, addr, id, kv.k)
		}
		for _, kv := range gauges(st) {
			gauge(d.queue, float64(kv.v), addr, id, kv.k)
		}
		gauge(d.pendingBytes, float64(st.PendingBytes), addr, id)
		gauge(d.idle, float64(st.IdleWorkers), addr, id)
		gauge(d.breaker, 1, addr, id, l.br.State().String())
		ch <- promhist.Const(d.rtt, l.rtt, addr, id)
		m.collectSync(ch, l, id)
	}

	counter(d.setChanges, m.members.added.Load(), "added")
	counter(d.setChanges, m.members.removed.Load(), "removed")
	counter(d.setChanges, m.members.returned.Load(), "returned")
	counter(d.removedDropped, m.members.dropped.Load())
	d.budget.collect(m, ch)
}

type kv struct {
	k string
	v uint64
}

// counters are the batcher's counters under the names of PeerStatus.
func counters(s batcher.Stats) []kv {
	return []kv{
		{"accepted", s.Accepted}, {"overridden", s.Overridden}, {"overflow", s.Overflow},
		{"expired", s.Expired}, {"replayed", s.Replayed}, {"succeeded", s.Succeeded},
		{"congestion", s.Congestion}, {"transient", s.Transient}, {"permanent", s.Permanent},
		{"stale", s.Stale}, {"too_large", s.TooLarge},
	}
}

// gauges are the batcher's queues, in events.
func gauges(s batcher.Stats) []kv {
	return []kv{
		{"acceptor", s.AcceptorQueue}, {"reprocess", s.ReprocessQueue}, {"pending", s.Pending},
		{"in_flight", s.InFlight},
	}
}

func (m *Mesh) collectSync(ch chan<- prometheus.Metric, l *link, id string) {
	d, s := &m.d, &l.sync
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range []kv{{"in_sync", s.inSync}, {"repaired", s.repaired}, {"failed", s.errs}} {
		ch <- prometheus.MustNewConstMetric(d.syncRounds, prometheus.CounterValue, float64(k.v), l.addr, id, k.k)
	}
	ch <- prometheus.MustNewConstMetric(d.syncKeys, prometheus.CounterValue, float64(s.pulled), l.addr, id, "pulled")
	ch <- prometheus.MustNewConstMetric(d.syncKeys, prometheus.CounterValue, float64(s.pushed), l.addr, id, "pushed")
	ch <- prometheus.MustNewConstMetric(d.syncBytes, prometheus.CounterValue, float64(s.digestBytes), l.addr, id, "digest")
	ch <- prometheus.MustNewConstMetric(d.syncBytes, prometheus.CounterValue, float64(s.bytes), l.addr, id, "all")
	ch <- prometheus.MustNewConstMetric(d.syncLimited, prometheus.CounterValue, float64(s.pushCut), l.addr, id, "cut")
	ch <- prometheus.MustNewConstMetric(d.syncLimited, prometheus.CounterValue, float64(s.pushHeld), l.addr, id, "held")
	for _, call := range syncCalls {
		ch <- prometheus.MustNewConstMetric(d.syncTimeouts, prometheus.CounterValue, float64(s.timeouts[call]), l.addr, id, call)
	}
	if !s.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(d.syncLast, prometheus.GaugeValue, float64(s.lastSuccess.UnixNano())/1e9, l.addr, id)
		ch <- prometheus.MustNewConstMetric(d.syncDur, prometheus.GaugeValue, s.lastDuration.Seconds(), l.addr, id)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
