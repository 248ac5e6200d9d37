// Package promhist is what the node and its transports share to keep latencies: one
// set of buckets, and unregistered histograms (lock-free Observe on the hot path)
// exported as constant metrics at scrape time, with the labels current then.
package promhist

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// LatencyBuckets returns the histogram buckets (seconds) of every latency of a node:
// they span a loopback round trip (~100 µs) to the 5 s --replicate-timeout and the 5 s
// default ack_timeout, and the gRPC handling times use them too.
func LatencyBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
}

// New returns an unregistered histogram with buckets: its owner observes into it and a
// Collector exports it with Const.
func New(buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "unregistered", Buckets: buckets})
}

// Const exports h's current counts under desc with the given label values.
func Const(desc *prometheus.Desc, h prometheus.Histogram, labels ...string) prometheus.Metric {
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
