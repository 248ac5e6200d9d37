package loadgen

import (
	"testing"
	"time"
)

func TestRecorderSeparatesWarmup(t *testing.T) {
	r := newRecorder()
	r.record(10*time.Millisecond, time.Millisecond, time.Millisecond, false)
	for i := range 100 {
		r.record(time.Second+time.Duration(i)*time.Millisecond, time.Duration(i+1)*100*time.Microsecond, time.Duration(i+2)*100*time.Microsecond, true)
	}
	s := r.snapshot()
	if s.total != 101 || s.measured != 100 || s.hist.TotalCount() != 100 || s.histDue.TotalCount() != 100 {
		t.Fatalf("total %d measured %d histograms %d, %d; want 101, 100, 100, 100", s.total, s.measured, s.hist.TotalCount(), s.histDue.TotalCount())
	}
	if s.hist.Min() != 100 || s.histDue.Min() != 200 {
		t.Fatalf("smallest latency from the send %d µs, from the due time %d µs; want 100, 200", s.hist.Min(), s.histDue.Min())
	}
	if s.lastMeasured != time.Second+99*time.Millisecond || s.lastArrival != s.lastMeasured {
		t.Fatalf("last measured %s, last arrival %s", s.lastMeasured, s.lastArrival)
	}
	if r.arrival() != s.lastArrival || r.totalCount() != 101 {
		t.Fatal("accessors disagree with the snapshot")
	}
}

func TestTakeIntervalMergesAndResets(t *testing.T) {
	a, b := newRecorder(), newRecorder()
	a.record(0, 100*time.Microsecond, 100*time.Microsecond, true)
	b.record(0, 300*time.Microsecond, 300*time.Microsecond, false)
	b.record(0, 500*time.Microsecond, 500*time.Microsecond, true)
	h := newHistogram()
	total := a.takeInterval(h) + b.takeInterval(h)
	if total != 3 || h.TotalCount() != 3 {
		t.Fatalf("total %d, merged %d; want 3 and 3 (warmup counts in the live view)", total, h.TotalCount())
	}
	h.Reset()
	if a.takeInterval(h)+b.takeInterval(h) != 3 || h.TotalCount() != 0 {
		t.Fatalf("second take: histogram %d, want 0 (reset)", h.TotalCount())
	}
	if b.snapshot().hist.TotalCount() != 1 {
		t.Fatal("taking the interval must not touch the measured histogram")
	}
}

func TestSummarize(t *testing.T) {
	h := newHistogram()
	if (summarize(h) != Latency{}) {
		t.Fatal("an empty histogram summarizes to zeros")
	}
	for v := int64(1); v <= 10000; v++ {
		h.RecordValue(v)
	}
	l := summarize(h)
	near := func(name string, got, want int64) {
		if d := float64(got-want) / float64(want); d < -0.002 || d > 0.002 {
			t.Errorf("%s = %d, want %d ± 0.2%%", name, got, want)
		}
	}
	near("p50", l.P50, 5000)
	near("p90", l.P90, 9000)
	near("p99", l.P99, 9900)
	near("p99.9", l.P999, 9990)
	near("max", l.Max, 10000)
	if l.Mean < 4990 || l.Mean > 5010 {
		t.Errorf("mean %g, want about 5000", l.Mean)
	}
}

func TestPerSecond(t *testing.T) {
	if got := perSecond(500, 250*time.Millisecond); got != 2000 {
		t.Fatalf("perSecond = %g, want 2000", got)
	}
	if got := perSecond(500, 0); got != 0 {
		t.Fatalf("perSecond over nothing = %g, want 0", got)
	}
}
