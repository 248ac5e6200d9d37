package fanout

import (
	"strconv"

	"github.com/fanout/fanout/internal/promhist"
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
	node *Node
	d    descs
}

type descs struct {
	submitted, received, lag, ackWait, refused, versions, relayed              *prometheus.Desc
	keys, keysLimit, bytes, bytesLimit, arena, tombstones, revision, compacted *prometheus.Desc
	stateOps, subs, delivered, ready, disk, diskLag, diskCommit                *prometheus.Desc
	tombBytes, tombsLimit, tombBytesLimit, peerWrites, ownOrigin               *prometheus.Desc
	diskFailures, diskFull, revisionBase                                       *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for n; register it on the caller's registry.
func NewCollector(n *Node) *Collector {
	g := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &Collector{node: n, d: descs{
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
		revision: g("fanout_state_revisions_total",
			"Changes the state table applied since the node started: the latest revision is base (fanout_state_revision_base_info) plus this, "+
				"exactly (a revision is an 18-digit number, which a float sample cannot hold to the unit)."),
		compacted: g("fanout_state_compacted_revisions",
			"The oldest revision a watch can resume after, as changes since the start: base (fanout_state_revision_base_info) plus this."),
		revisionBase: g("fanout_state_revision_base_info",
			"Always 1; base is the revision the state table counted from at the node's start (its start time in version units), in full: "+
				"a revision in GetStatus, get or watch is base plus fanout_state_revisions_total.", "base"),
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
	for _, x := range []*prometheus.Desc{d.submitted, d.received, d.lag, d.ackWait, d.refused, d.versions, d.relayed,
		d.keys, d.keysLimit, d.bytes, d.bytesLimit, d.arena, d.tombstones, d.revision, d.compacted,
		d.stateOps, d.subs, d.delivered, d.ready, d.disk, d.diskLag, d.diskCommit, d.diskFailures, d.diskFull,
		d.tombBytes, d.tombsLimit, d.tombBytesLimit, d.peerWrites, d.ownOrigin, d.revisionBase} {
		ch <- x
	}
	c.node.tr.Describe(ch)
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
	n.tr.Collect(ch) // the transport's series: per peer, for the mesh

	for i, name := range subOutcomeNames {
		counter(d.submitted, n.submitted[i].Load(), name)
	}
	for origin, o := range n.received.snapshot() {
		for i, name := range recvOutcomeNames {
			counter(d.received, o.outcomes[i].Load(), origin, name)
		}
		ch <- promhist.Const(d.lag, o.lag, origin)
	}
	counter(d.refused, n.refused.unauthenticated.Load(), "unauthenticated")
	counter(d.refused, n.refused.origin.Load(), "origin")
	counter(d.relayed, n.relayed.Load())
	counter(d.versions, n.versionsRefused.app.Load(), "app")
	counter(d.versions, n.versionsRefused.peer.Load(), "peer")
	counter(d.versions, n.versionsRefused.sync.Load(), "anti_entropy")
	for _, p := range ackPolicies {
		ch <- promhist.Const(d.ackWait, n.ackWait.h[p][0], ackPolicyName(p), "false")
		ch <- promhist.Const(d.ackWait, n.ackWait.h[p][1], ackPolicyName(p), "true")
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
	base := n.cfg.State.FirstRevision
	counter(d.revision, st.Revision-min(st.Revision, base))
	gauge(d.compacted, float64(st.Compacted-min(st.Compacted, base)))
	gauge(d.revisionBase, 1, strconv.FormatUint(base, 10))
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
