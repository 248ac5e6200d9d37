package loadkit

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The latency histograms record microseconds from 1 µs to 60 s at 3 significant
// figures: 0.1% resolution at every scale, about 200 KiB per histogram.
const (
	MinUs   = 1
	MaxUs   = 60_000_000
	SigFigs = 3
)

// NewHistogram returns an empty latency histogram with the range above.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(MinUs, MaxUs, SigFigs)
}

// Us converts a latency to the histograms' unit, clamped to their range: a latency
// below 1 µs (or negative) counts as 1 µs, one above 60 s as 60 s.
func Us(d time.Duration) int64 {
	return min(max(d.Microseconds(), MinUs), MaxUs)
}

// Latency is a summary of a latency histogram, in microseconds.
type Latency struct {
	P50  int64   `json:"p50_us"`
	P90  int64   `json:"p90_us"`
	P99  int64   `json:"p99_us"`
	P999 int64   `json:"p999_us"`
	Max  int64   `json:"max_us"`
	Mean float64 `json:"mean_us"`
}

// Summarize returns the percentiles of h (all zero for an empty histogram).
func Summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		P50:  h.ValueAtQuantile(50),
		P90:  h.ValueAtQuantile(90),
		P99:  h.ValueAtQuantile(99),
		P999: h.ValueAtQuantile(99.9),
		Max:  h.Max(),
		Mean: h.Mean(),
	}
}
