package loadgen

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/fanout/fanout/bench/loadkit"
)

// newHistogram is a latency histogram of the range both benches of bench-compare
// use: 1 µs to 60 s at 3 significant figures (bench/loadkit).
func newHistogram() *hdrhistogram.Histogram { return loadkit.NewHistogram() }

// recorder is one subscriber's statistics. The subscriber's goroutine writes them;
// the live reporter and Run read them. mu guards every field.
type recorder struct {
	mu sync.Mutex
	// total counts every event of the run received, warmup included.
	total uint64
	// measured counts the events due in the measured window; hist holds their
	// latency from the actual send, histDue from the time they were due.
	measured uint64
	hist     *hdrhistogram.Histogram
	histDue  *hdrhistogram.Histogram
	// toOrigin and fromOrigin split the latency of the measured events at the
	// origin's accept (the delivery's submitted_at): from the send to it, and from it
	// to the arrival. Only events with both a payload stamp and a submitted_at.
	toOrigin, fromOrigin *hdrhistogram.Histogram
	// interval holds the latency of every event since the last live line.
	interval *hdrhistogram.Histogram
	// lastArrival and lastMeasured are arrival offsets from the epoch of the last
	// event and of the last measured event.
	lastArrival, lastMeasured time.Duration
}

func newRecorder() *recorder {
	return &recorder{hist: newHistogram(), histDue: newHistogram(), toOrigin: newHistogram(), fromOrigin: newHistogram(),
		interval: newHistogram()}
}

// record adds one received event that arrived at offset arrival from the epoch, with
// its latencies from the actual send and from the due time.
func (r *recorder) record(arrival, latency, fromDue time.Duration, measured bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(arrival, latency, fromDue, measured)
}

// recordSplit is record for a measured event whose latency is also split at the
// origin's accept: from the send to it and from it to the arrival. Us clamps a
// negative part (a wall clock that stepped) to the histogram's least value.
func (r *recorder) recordSplit(arrival, latency, fromDue, toOrigin, fromOrigin time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.add(arrival, latency, fromDue, true)
	r.toOrigin.RecordValue(loadkit.Us(toOrigin))     //nolint:errcheck // clamped to the range
	r.fromOrigin.RecordValue(loadkit.Us(fromOrigin)) //nolint:errcheck // clamped to the range
}

// add is record under r.mu.
func (r *recorder) add(arrival, latency, fromDue time.Duration, measured bool) {
	us := loadkit.Us(latency)
	r.total++
	r.lastArrival = arrival
	r.interval.RecordValue(us) //nolint:errcheck // us is clamped to the range
	if measured {
		r.measured++
		r.lastMeasured = arrival
		r.hist.RecordValue(us)                     //nolint:errcheck // us is clamped to the range
		r.histDue.RecordValue(loadkit.Us(fromDue)) //nolint:errcheck // clamped too
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
	hist, histDue             *hdrhistogram.Histogram
	toOrigin, fromOrigin      *hdrhistogram.Histogram
	lastArrival, lastMeasured time.Duration
}

func (r *recorder) snapshot() recorderSnapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, hd, to, from := newHistogram(), newHistogram(), newHistogram(), newHistogram()
	h.Merge(r.hist)
	hd.Merge(r.histDue)
	to.Merge(r.toOrigin)
	from.Merge(r.fromOrigin)
	return recorderSnapshot{total: r.total, measured: r.measured, hist: h, histDue: hd, toOrigin: to, fromOrigin: from,
		lastArrival: r.lastArrival, lastMeasured: r.lastMeasured}
}

func (r *recorder) totalCount() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Latency is a summary of a latency histogram, in microseconds (bench/loadkit: the
// same fields in both benches' JSON).
type Latency = loadkit.Latency

func summarize(h *hdrhistogram.Histogram) Latency { return loadkit.Summarize(h) }

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
