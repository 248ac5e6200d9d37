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
}

func newSeries() *series {
	return &series{
		conflicts: prometheus.NewDesc("fanout_jetstream_cas_conflicts_total",
			"Publishes that met a wrong last subject sequence: another node wrote the key first.", nil, nil),
		retries: prometheus.NewDesc("fanout_jetstream_cas_retries_total",
			"Publishes that followed a conflict, after a read of the key.", nil, nil),
		gaveUp: prometheus.NewDesc("fanout_jetstream_cas_gave_up_total",
			"Events that met a conflict at each of their attempts (Config.MaxAttempts) and failed.", nil, nil),
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
	}
}

// Describe sends the transport's descriptors.
func (t *Transport) Describe(ch chan<- *prometheus.Desc) {
	s := t.series
	for _, d := range []*prometheus.Desc{s.conflicts, s.retries, s.gaveUp, s.lag, s.applied, s.foreign, s.refused,
		s.reconnects, s.outboxBytes, s.outboxEvents, s.overflow} {
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
	var lag, applied, foreign, refused uint64
	if fd := t.fd.Load(); fd != nil {
		lag, applied, foreign, refused = fd.lag.Load(), fd.applied.Load(), fd.foreign.Load(), fd.refused.Load()
	}
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
