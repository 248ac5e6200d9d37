package fanout

import (
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exposes the node's counters, gauges and latency histograms to
// Prometheus. It reads them at scrape time (the batchers' Stats, the table's, the
// histograms the node and its links observe into), so the hot path pays only for
// an atomic add or a lock-free Observe.
//
// Every per-peer series is labelled peer (the address in --peers) and peer_id (the
// peer's node id, "" until its first answer). The names of outcomes are the API's:
// the batcher's counters as in PeerStatus, received events as ItemStatus, submitted
// ones as EventOutcome.
type Collector struct {
	node   *Node
	d      descs
	budget budgetDescs // budget.go
}

type descs struct {
	peers, events, queue, pendingBytes, idle, breaker, rtt, conflict, setChanges, removedDropped *prometheus.Desc
	syncRounds, syncKeys, syncBytes, syncLast, syncDur                                           *prometheus.Desc
	syncLimited, syncTimeouts                                                                    *prometheus.Desc
	submitted, received, lag, ackWait, refused, versions, relayed                                *prometheus.Desc
	keys, keysLimit, bytes, bytesLimit, arena, tombstones, revision, compacted                   *prometheus.Desc
	stateOps, subs, delivered, ready, disk, diskLag, diskCommit                                  *prometheus.Desc
	tombBytes, tombsLimit, tombBytesLimit, peerWrites, ownOrigin                                 *prometheus.Desc
	diskFailures, diskFull                                                                       *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for n; register it on the caller's registry.
func NewCollector(n *Node) *Collector {
	peer := []string{"peer", "peer_id"}
	with := func(l ...string) []string { return append(append([]string(nil), peer...), l...) }
	g := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &Collector{node: n, budget: newBudgetDescs(), d: descs{
		peers: g("fanout_peers", "1 per peer in this node's peer set; 0 for a peer that left it (DNS no longer names it) and is still sent "+
			"what it had pending, for up to --peer-removal-grace. peer_id is its node id once it has answered.", peer...),
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
		syncTimeouts: g("fanout_sync_call_timeouts_total",
			"Anti-entropy calls to the peer that passed their deadline, by call: digest, pull (silent for --replicate-timeout, "+
				"or not ended within 1m), push. The round fails; the rounds with the other peers go on.", with("call")...),
		submitted: g("fanout_submitted_events_total",
			"Events the local app submitted, by outcome: accepted, stale (the node held a newer version), refused (the state table is full).", "outcome"),
		received: g("fanout_received_events_total",
			"Events received from peers by Replicate, by origin (the sender's node id; \"\" for the origins past the first 64) "+
				"and outcome: ok (stored), stale (the node held newer), busy (the state table is full; the peer retries), invalid.", "origin", "outcome"),
		lag: g("fanout_receive_lag_seconds",
			"Time from Submit at the origin to arrival here, per received event (clock skew between the hosts included; "+
				"a negative lag counts as 0).", "origin"),
		ackWait: g("fanout_ack_wait_seconds",
			"How long a Submit with ack ONE, QUORUM or ALL waited for its peers, by policy and by whether it was satisfied.", "policy", "satisfied"),
		refused: g("fanout_peer_calls_refused_total",
			"Replicate and anti-entropy Push calls refused with peers authenticated (mutual TLS), by reason: unauthenticated (no client "+
				"certificate), origin (the call names another node than the caller's certificate).", "reason"),
		relayed: g("fanout_sync_relayed_entries_total",
			"Anti-entropy entries received from a peer that is not their origin (nor this node), checked and offered to the state table: "+
				"how a node gets the writes of nodes that are down or gone. With mutual TLS the sender is authenticated, the entries' "+
				"origins are not (docs/SECURITY.md)."),
		versions: g("fanout_versions_refused_total",
			"Versions refused as too far ahead of this node's clock (or 0 from a peer), by where they came from: app (the whole Submit is "+
				"refused), peer (that event of a Replicate is answered invalid), anti_entropy (the whole sync message is refused).", "from"),
		keys:       g("fanout_state_keys", "Keys in the state table, tombstones not included (they have their own bound)."),
		keysLimit:  g("fanout_state_keys_limit", "The bound on keys: --state-max-keys."),
		bytes:      g("fanout_state_bytes", "Event bytes of the keys in the state table, tombstones not included."),
		bytesLimit: g("fanout_state_bytes_limit", "The bound on event bytes: --state-max-bytes."),
		tombBytes:  g("fanout_state_tombstone_bytes", "Event bytes of the tombstones in the state table."),
		tombsLimit: g("fanout_state_tombstones_limit",
			"The bound on tombstones: --state-max-tombstones. At it, the oldest are collected before --tombstone-ttl."),
		tombBytesLimit: g("fanout_state_tombstone_bytes_limit", "The bound on the tombstones' event bytes: --state-max-tombstone-bytes."),
		peerWrites: g("fanout_state_peer_writes_total",
			"Writes from peers by source (the node id of the peer that sent them: a Replicate's origin, an anti-entropy round's peer; \"\" "+
				"for the sources past the first 64) and outcome: added (a key the state table did not hold), refused (at the bounds less "+
				"the share kept for this node's app; answered BUSY, the sender retries). A flood of new keys shows who sends it.", "source", "outcome"),
		ownOrigin: g("fanout_own_origin_entries_total",
			"Entries peers sent that claim this node's origin, by path (replicate, anti_entropy) and outcome: refused (this process "+
				"would hold it and does not: planted by a peer, or another process runs with this --node-id), restored (a write of "+
				"an earlier process of this node, before a restart, taken back from a peer).", "path", "outcome"),
		arena:      g("fanout_state_arena_bytes", "Bytes the state table's arenas hold, live and garbage."),
		tombstones: g("fanout_state_tombstones", "Deleted keys still remembered (for --tombstone-ttl, within --state-max-tombstones)."),
		revision:   g("fanout_state_revision", "The state table's latest revision."),
		compacted:  g("fanout_state_compacted_revision", "The oldest revision a watch can resume after."),
		stateOps: g("fanout_state_writes_total",
			"Writes the state table did not apply (refused at a bound, stale), and tombstones collected: after --tombstone-ttl "+
				"(collected), or before it to make room at --state-max-tombstones or --state-max-tombstone-bytes (collected_early).", "kind"),
		subs:      g("fanout_subscribers", "Open Subscribe streams."),
		delivered: g("fanout_delivered_events_total", "Events sent on Subscribe streams."),
		ready: g("fanout_ready",
			"1 when the named health service fanout.v1.FanoutService is SERVING (bootstrap ended, not draining)."),
		disk: g("fanout_data_dir_total",
			"With --data-dir: commits (each one fsync), records written, tombstones deleted, failed commits.", "kind"),
		diskLag: g("fanout_data_dir_lag_revisions",
			"With --data-dir: state table revisions not yet on disk (0 when idle; growing: the disk is slower than the writes, or failing)."),
		diskCommit: g("fanout_data_dir_last_commit_seconds", "With --data-dir: how long the last commit took, its fsync included."),
		diskFailures: g("fanout_data_dir_failures_total",
			"With --data-dir: failed commits by kind: disk_full (refused below --data-dir-min-free-bytes), io (the store failed and reopened), other.", "kind"),
		diskFull: g("fanout_data_dir_disk_full",
			"With --data-dir: 1 while commits fail because the disk is below --data-dir-min-free-bytes (the node is not ready then)."),
	}}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.d
	for _, x := range []*prometheus.Desc{d.peers, d.conflict, d.setChanges, d.removedDropped, d.events, d.queue, d.pendingBytes, d.idle, d.breaker, d.rtt,
		d.syncRounds, d.syncKeys, d.syncBytes, d.syncLast, d.syncDur, d.submitted, d.received, d.lag, d.ackWait, d.refused, d.versions, d.relayed,
		d.keys, d.keysLimit, d.bytes, d.bytesLimit, d.arena, d.tombstones, d.revision, d.compacted,
		d.stateOps, d.subs, d.delivered, d.ready, d.disk, d.diskLag, d.diskCommit, d.diskFailures, d.diskFull,
		d.tombBytes, d.tombsLimit, d.tombBytesLimit, d.peerWrites, d.ownOrigin} {
		ch <- x
	}
	ch <- d.syncLimited
	ch <- d.syncTimeouts
	c.budget.describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	d, n := &c.d, c.node
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	for _, l := range n.allLinks() {
		addr, id := l.addr, l.peerNodeID()
		st := l.b.Stats()
		gauge(d.peers, boolGauge(!l.removing.Load()), addr, id)
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
		ch <- constHistogram(d.rtt, l.rtt, addr, id)
		c.collectSync(ch, l, id)
	}

	for i, name := range subOutcomeNames {
		counter(d.submitted, n.submitted[i].Load(), name)
	}
	for origin, o := range n.received.snapshot() {
		for i, name := range recvOutcomeNames {
			counter(d.received, o.outcomes[i].Load(), origin, name)
		}
		ch <- constHistogram(d.lag, o.lag, origin)
	}
	counter(d.refused, n.refused.unauthenticated.Load(), "unauthenticated")
	counter(d.refused, n.refused.origin.Load(), "origin")
	counter(d.setChanges, n.members.added.Load(), "added")
	counter(d.setChanges, n.members.removed.Load(), "removed")
	counter(d.setChanges, n.members.returned.Load(), "returned")
	counter(d.removedDropped, n.members.dropped.Load())
	c.budget.collect(n, ch)
	counter(d.relayed, n.relayed.Load())
	counter(d.versions, n.versionsRefused.app.Load(), "app")
	counter(d.versions, n.versionsRefused.peer.Load(), "peer")
	counter(d.versions, n.versionsRefused.sync.Load(), "anti_entropy")
	for _, p := range ackPolicies {
		ch <- constHistogram(d.ackWait, n.ackWait.h[p][0], ackPolicyName(p), "false")
		ch <- constHistogram(d.ackWait, n.ackWait.h[p][1], ackPolicyName(p), "true")
	}

	ready := 0.0
	if ok, _ := n.Readiness(); ok {
		ready = 1
	}
	gauge(d.ready, ready)
	st, bounds := n.table.Stats(), n.table.Config()
	gauge(d.keys, float64(st.Keys))
	gauge(d.keysLimit, float64(bounds.MaxKeys))
	gauge(d.bytes, float64(st.Bytes))
	gauge(d.bytesLimit, float64(bounds.MaxBytes))
	gauge(d.arena, float64(st.ArenaBytes))
	gauge(d.tombstones, float64(st.Tombstones))
	gauge(d.tombBytes, float64(st.TombstoneBytes))
	gauge(d.tombsLimit, float64(bounds.MaxTombstones))
	gauge(d.tombBytesLimit, float64(bounds.MaxTombstoneBytes))
	for source, c := range n.sources.snapshot() {
		counter(d.peerWrites, c.added.Load(), source, "added")
		counter(d.peerWrites, c.refused.Load(), source, "refused")
	}
	counter(d.ownOrigin, n.own.replicateRefused.Load(), "replicate", "refused")
	counter(d.ownOrigin, n.own.syncRefused.Load(), "anti_entropy", "refused")
	counter(d.ownOrigin, n.own.syncRestored.Load(), "anti_entropy", "restored")
	gauge(d.revision, float64(st.Revision))
	gauge(d.compacted, float64(st.Compacted))
	for _, k := range []kv{{"refused", st.Refused}, {"stale", st.StaleSeen}, {"collected", st.Collected}, {"collected_early", st.CollectedEarly}} {
		counter(d.stateOps, k.v, k.k)
	}
	if p := n.persist; p != nil {
		ps := p.Stats()
		for _, k := range []kv{{"commits", ps.Commits}, {"records", ps.Records}, {"deletes", ps.Deletes}, {"failures", ps.Failures}} {
			counter(d.disk, k.v, k.k)
		}
		gauge(d.diskLag, float64(ps.Latest-min(ps.Latest, ps.Durable)))
		gauge(d.diskCommit, ps.LastCommit.Seconds())
		other := ps.Failures - ps.DiskFull - ps.IOErrors
		for _, k := range []kv{{"disk_full", ps.DiskFull}, {"io", ps.IOErrors}, {"other", other}} {
			counter(d.diskFailures, k.v, k.k)
		}
		full := 0.0
		if ps.Full {
			full = 1
		}
		gauge(d.diskFull, full)
	}
	gauge(d.subs, float64(n.subscribers.Load()))
	counter(d.delivered, n.delivered.Load())
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

func (c *Collector) collectSync(ch chan<- prometheus.Metric, l *link, id string) {
	d, s := &c.d, &l.sync
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
