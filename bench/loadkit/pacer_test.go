package loadkit

import (
	"context"
	"testing"
	"time"
)

func TestDueAt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sent  int64
		batch int
		rate  float64
		want  time.Duration
	}{
		{"first single event at 1000/s", 0, 1, 1000, time.Millisecond},
		{"first batch of 10 at 1000/s waits for its 10th event", 0, 10, 1000, 10 * time.Millisecond},
		{"second batch of 10 at 1000/s", 10, 10, 1000, 20 * time.Millisecond},
		{"one second of events", 9990, 10, 10000, time.Second},
		{"fractional rate", 0, 1, 3, 333333333 * time.Nanosecond},
		{"unpaced is always due", 1 << 40, 10, 0, 0},
		{"negative rate is unpaced", 5, 1, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DueAt(tc.sent, tc.batch, tc.rate); got != tc.want {
				t.Fatalf("DueAt(%d, %d, %g) = %s, want %s", tc.sent, tc.batch, tc.rate, got, tc.want)
			}
		})
	}
}

// The schedule offers exactly rate events per second, whatever the batch.
func TestDueAtKeepsTheRate(t *testing.T) {
	for _, batch := range []int{1, 7, 10, 250} {
		const rate = 12345.0
		var sent int64
		for DueAt(sent, batch, rate) <= 10*time.Second {
			sent += int64(batch)
		}
		if got := float64(sent) / 10; got < rate-float64(batch) || got > rate+float64(batch) {
			t.Errorf("batch %d: %.0f events/s offered, want %.0f", batch, got, rate)
		}
	}
}

// fakeClock is a clock the test moves; Next's timer still runs on real time, so the
// tests keep every due time in the past or a few milliseconds ahead.
type fakeClock struct{ now time.Duration }

func (c *fakeClock) since() time.Duration { return c.now }

// A paced publisher that fell behind sends at once, in order, and every send is
// stamped with the clock at Stamp, its due time kept: the lag is recorded.
func TestPacerIsOpenLoop(t *testing.T) {
	c := &fakeClock{now: 50 * time.Millisecond} // 50 ms behind a 1000/s schedule
	p := NewPacer(c.since, 1000, 10, 0, 100*time.Millisecond)
	defer p.Stop()
	var dues []time.Duration
	for {
		due, ok, err := p.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		s := p.Stamp(due)
		if s.Due != due || s.Sent != c.now {
			t.Fatalf("stamp %+v, want due %s sent %s", s, due, c.now)
		}
		p.Done(10, s)
		dues = append(dues, due)
		if due >= c.now { // caught up: let the clock follow the schedule
			c.now = due
		}
	}
	want := []time.Duration{10, 20, 30, 40, 50, 60, 70, 80, 90}
	if len(dues) != len(want) {
		t.Fatalf("due times %v, want %v ms", dues, want)
	}
	for i := range want {
		if dues[i] != want[i]*time.Millisecond {
			t.Fatalf("due times %v, want %v ms", dues, want)
		}
	}
	if got := p.Lag().Max(); got < 39_900 || got > 40_100 {
		t.Fatalf("largest lag %d µs, want 40 ms (the first send, due at 10 ms, went at 50)", got)
	}
}

func TestPacerWaitsForTheDueTime(t *testing.T) {
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	p := NewPacer(since, 200, 1, 0, time.Hour) // first send due at 5 ms
	defer p.Stop()
	due, ok, err := p.Next(context.Background())
	if err != nil || !ok || due != 5*time.Millisecond {
		t.Fatalf("Next = %s, %v, %v", due, ok, err)
	}
	if now := since(); now < due {
		t.Fatalf("Next returned at %s, before the due time %s", now, due)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok, err := p.Next(ctx); ok || err == nil {
		t.Fatal("Next after cancel must fail")
	}
}

func TestUnpacedPacer(t *testing.T) {
	c := &fakeClock{now: 3 * time.Second}
	p := NewPacer(c.since, 0, 10, 0, 5*time.Second)
	due, ok, err := p.Next(context.Background())
	if err != nil || !ok || due != 3*time.Second {
		t.Fatalf("Next = %s, %v, %v; want now, true", due, ok, err)
	}
	c.now = 4 * time.Second // waited for flow control
	if s := p.Stamp(due); s.Sent != 4*time.Second || s.Due != s.Sent {
		t.Fatalf("an unpaced send's stamp %+v: want due = sent = 4s", s)
	}
	c.now = 5 * time.Second
	if _, ok, _ := p.Next(context.Background()); ok {
		t.Fatal("Next at the end must stop")
	}
}
