package jetstream

import (
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/prometheus/client_golang/prometheus"
)

// series are the transport's descriptors; the values are read from its counters at
// each scrape (Collect). Nothing is registered globally: the node exports them on its
// registry.
type series struct {
	conflicts, retries, gaveUp          *prometheus.Desc // the stream's CAS
	lag, applied, foreign, refused      *prometheus.Desc // the feed
	reconnects                          *prometheus.Desc // the connection
	outboxBytes, outboxEvents, overflow *prometheus.Desc // the outbox
	resets, savedSeq, republished       *prometheus.Desc // the feed's restarts, the position
	purged                              *prometheus.Desc // the sidecars' purge of markers
}

func newSeries() *series {
	return &series{
		conflicts: prometheus.NewDesc("fanout_jetstream_cas_conflicts_total",
			"Publishes that met a wrong last subject sequence: another node wrote the key first.", nil, nil),
		retries: prometheus.NewDesc("fanout_jetstream_cas_retries_total",
			"Publishes that followed a conflict, after a read of the key.", nil, nil),
		gaveUp: prometheus.NewDesc("fanout_jetstream_cas_gave_up_total",
			"Puts of an event that met a conflict at each of their attempts (Config.MaxAttempts); the event is retried after a back-off.", nil, nil),
		lag: prometheus.NewDesc("fanout_jetstream_feed_lag_messages",
			"Messages of the stream after the last one the feed applied, as the server counted at its delivery.", nil, nil),
		applied: prometheus.NewDesc("fanout_jetstream_feed_applied_sequence",
			"The stream sequence of the last message the feed handled.", nil, nil),
		foreign: prometheus.NewDesc("fanout_jetstream_feed_foreign_total",
			"Messages of the stream the feed skipped: not written by this transport (a `nats kv put`, a purge marker).", nil, nil),
		refused: prometheus.NewDesc("fanout_jetstream_feed_refused_total",
			"Messages of the stream the node refused to apply (outside its limits, too far ahead).", nil, nil),
		reconnects: prometheus.NewDesc("fanout_jetstream_reconnects_total",
			"Reconnects of the NATS connection.", nil, nil),
		outboxBytes: prometheus.NewDesc("fanout_jetstream_outbox_bytes",
			"Event bytes queued for the stream or in flight (bounded by Config.OutboxBytes).", nil, nil),
		outboxEvents: prometheus.NewDesc("fanout_jetstream_outbox_events",
			"Events queued for the stream or in flight.", nil, nil),
		overflow: prometheus.NewDesc("fanout_jetstream_outbox_overflow_total",
			"Events dropped because the outbox was full (FateOverflow).", nil, nil),
		resets: prometheus.NewDesc("fanout_jetstream_feed_resets_total",
			"Consumers the feed replaced because they delivered nothing while the stream held more.", nil, nil),
		savedSeq: prometheus.NewDesc("fanout_jetstream_position_saved_sequence",
			"The feed's stream sequence saved last to the data dir (--data-dir): a restart resumes after it.", nil, nil),
		republished: prometheus.NewDesc("fanout_jetstream_republished_total",
			"This node's events published again at start: in the data dir's table, maybe not in the stream before the restart.", nil, nil),
		purged: prometheus.NewDesc("fanout_jetstream_markers_purged_total",
			"Delete markers this sidecar purged after --tombstone-ttl (a server without per-message TTLs).", nil, nil),
	}
}

// Describe sends the transport's descriptors.
func (t *Transport) Describe(ch chan<- *prometheus.Desc) {
	s := t.series
	for _, d := range []*prometheus.Desc{s.conflicts, s.retries, s.gaveUp, s.lag, s.applied, s.foreign, s.refused,
		s.reconnects, s.outboxBytes, s.outboxEvents, s.overflow, s.resets, s.savedSeq, s.republished, s.purged} {
		ch <- d
	}
	t.latency.Describe(ch)
}

// Collect sends the transport's series.
func (t *Transport) Collect(ch chan<- prometheus.Metric) {
	s := t.series
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	var conflicts, retries, gaveUp uint64
	if st := t.st.Load(); st != nil {
		conflicts, retries, gaveUp = st.conflicts.Load(), st.retries.Load(), st.gaveUp.Load()
	}
	counter(s.conflicts, conflicts)
	counter(s.retries, retries)
	counter(s.gaveUp, gaveUp)
	var lag, applied, foreign, refused, resets uint64
	if fd := t.fd.Load(); fd != nil {
		lag, applied, foreign, refused, resets = fd.lag.Load(), fd.applied.Load(), fd.foreign.Load(), fd.refused.Load(), fd.resets.Load()
	}
	counter(s.resets, resets)
	gauge(s.savedSeq, float64(t.savedSeq.Load()))
	counter(s.republished, t.republished.Load())
	counter(s.purged, t.markers.purged.Load())
	gauge(s.lag, float64(lag))
	gauge(s.applied, float64(applied))
	counter(s.foreign, foreign)
	counter(s.refused, refused)
	counter(s.reconnects, t.nc.Stats().Reconnects)
	queued, bytes, inFlight := t.ob.stats()
	gauge(s.outboxBytes, float64(bytes))
	gauge(s.outboxEvents, float64(queued+inFlight))
	counter(s.overflow, t.fates[batcher.FateOverflow].Load())
	t.latency.Collect(ch)
}
