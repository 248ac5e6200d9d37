package mesh

import (
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/prometheus/client_golang/prometheus"
)

// The mesh's memory budget (issue 25): one batcher.Budget of Config.MaxPendingBytes
// that every peer's batcher charges with its pending events, so that the sum over
// the peers is bounded, not each peer alone (--max-buffer-bytes): 300 dead peers of
// 64 MiB each is no bound. The batchers of the peers that are down keep to half of
// it, each to its share, and lose their oldest events first (anti-entropy repairs
// them); the peers that are sending have the rest. A link's charge goes when it
// closes, so memory returns when peers leave the set. batcher.Budget says how.

// pendingBudgetBytes is the least MaxPendingBytes: one event at the limits, as a
// batcher charges it.
func (c *Config) pendingBudgetBytes() int {
	return wire.ReplicateItemBytes(c.EventBytes) + batcher.TaskOverhead[wire.Outgoing]()
}

// budgetDescs are the budget's series on /metrics.
type budgetDescs struct {
	used, limit, evicted *prometheus.Desc
}

func newBudgetDescs() budgetDescs {
	return budgetDescs{
		used: prometheus.NewDesc("fanout_pending_bytes",
			"Bytes the events pending for all peers together cost, as --max-pending-bytes counts them: each event's bytes once per "+
				"peer it waits for, plus its bookkeeping.", nil, nil),
		limit: prometheus.NewDesc("fanout_pending_bytes_limit", "The bound on fanout_pending_bytes: --max-pending-bytes.", nil, nil),
		evicted: prometheus.NewDesc("fanout_pending_budget_evicted_events_total",
			"Events dropped from a peer's queue because the node was at --max-pending-bytes (the oldest events of the peers over "+
				"their share; also counted in fanout_peer_events_total{kind=\"overflow\"}); anti-entropy repairs them.", nil, nil),
	}
}

func (d *budgetDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.used
	ch <- d.limit
	ch <- d.evicted
}

func (d *budgetDescs) collect(m *Mesh, ch chan<- prometheus.Metric) {
	st := m.budget.Stats()
	ch <- prometheus.MustNewConstMetric(d.used, prometheus.GaugeValue, float64(st.Used))
	ch <- prometheus.MustNewConstMetric(d.limit, prometheus.GaugeValue, float64(st.Limit))
	ch <- prometheus.MustNewConstMetric(d.evicted, prometheus.CounterValue, float64(st.Evicted))
}

// PendingBudget reports the mesh's memory budget over its peers' pending events.
func (m *Mesh) PendingBudget() batcher.BudgetStats { return m.budget.Stats() }
