package loadgen

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The latency histograms record microseconds from 1 µs to 60 s at 3 significant
// figures: 0.1% resolution at every scale, about 200 KiB per histogram.
const (
	minLatencyUs   = 1
	maxLatencyUs   = 60_000_000
	latencySigFigs = 3
)

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(minLatencyUs, maxLatencyUs, latencySigFigs)
}

// latencyUs converts a latency to the histogram's unit, clamped to its range: a
// latency below 1 µs (or negative, if clocks disagree) counts as 1 µs, one above 60 s
// as 60 s.
func latencyUs(d time.Duration) int64 {
	return min(max(d.Microseconds(), minLatencyUs), maxLatencyUs)
}

// recorder is one subscriber's statistics. The subscriber's goroutine writes them;
// the live reporter and Run read them. mu guards every field.
type recorder struct {
	mu sync.Mutex
	// total counts every event of the run received, warmup included.
	total uint64
	// measured counts the events sent in the measured window; hist holds their
	// latency.
	measured uint64
	hist     *hdrhistogram.Histogram
	// interval holds the latency of every event since the last live line.
	interval *hdrhistogram.Histogram
	// lastArrival and lastMeasured are arrival offsets from the epoch of the last
	// event and of the last measured event.
	lastArrival, lastMeasured time.Duration
}

func newRecorder() *recorder {
	return &recorder{hist: newHistogram(), interval: newHistogram()}
}

// record adds one received event that arrived at offset arrival from the epoch.
func (r *recorder) record(arrival, latency time.Duration, measured bool) {
	us := latencyUs(latency)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.lastArrival = arrival
	r.interval.RecordValue(us) //nolint:errcheck // us is clamped to the range
	if measured {
		r.measured++
		r.lastMeasured = arrival
		r.hist.RecordValue(us) //nolint:errcheck // us is clamped to the range
	}
}

// takeInterval merges the interval histogram into into, resets it, and returns the
// total count.
func (r *recorder) takeInterval(into *hdrhistogram.Histogram) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	into.Merge(r.interval)
	r.interval.Reset()
	return r.total
}

// recorderSnapshot is a copy of a recorder's counters and measured histogram.
type recorderSnapshot struct {
	total, measured           uint64
	hist                      *hdrhistogram.Histogram
	lastArrival, lastMeasured time.Duration
}

func (r *recorder) snapshot() recorderSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := newHistogram()
	h.Merge(r.hist)
	return recorderSnapshot{total: r.total, measured: r.measured, hist: h, lastArrival: r.lastArrival, lastMeasured: r.lastMeasured}
}

func (r *recorder) totalCount() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
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

func summarize(h *hdrhistogram.Histogram) Latency {
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

// perSecond is count over d, or 0 for an empty d.
func perSecond(count uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(count) / d.Seconds()
}

// arrival returns the arrival offset of the last event received.
func (r *recorder) arrival() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastArrival
}
