package mesh

import (
	"sync"

	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// framePool recycles the frames the links build their Replicate requests in.
var framePool = sync.Pool{New: func() any { return new(frame.Frame) }}

// outItemBytes is what o adds to a ReplicateRequest: the batcher's Config.Size, so
// that a batch of MaxBatchBytes is a request of at most that plus
// wire.MessageOverhead(), and pending's bytes are what would be sent.
func outItemBytes(o wire.Outgoing) int { return wire.ReplicateItemBytes(len(o.Raw)) }

// latencyBuckets (seconds) span a loopback round trip (~100 µs) to the 5 s
// --replicate-timeout; the node's latencies use the same (fanout.LatencyBuckets).
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newHistogram(buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "unregistered", Buckets: buckets})
}

// constHistogram exports h's current counts under desc with the given label values.
func constHistogram(desc *prometheus.Desc, h prometheus.Histogram, labels ...string) prometheus.Metric {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	hist := m.GetHistogram()
	buckets := make(map[float64]uint64, len(hist.GetBucket()))
	for _, b := range hist.GetBucket() {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	return prometheus.MustNewConstHistogram(desc, hist.GetSampleCount(), hist.GetSampleSum(), buckets, labels...)
}
