package refresh

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only on Advance. Every timer it makes is also sent
// on created, in order, so a test can wait until the Task is blocked on a timer
// (and see how long it is) before it moves time: no sleeps.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time    // guarded by mu
	pending []*fakeTimer // guarded by mu: started, neither fired nor stopped
	created chan *fakeTimer
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock() *fakeClock {
	return &fakeClock{
		now:     time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		created: make(chan *fakeTimer, 1000),
	}
}

type fakeTimer struct {
	clk *fakeClock
	d   time.Duration // as asked of NewTimer
	at  time.Time
	c   chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	t := &fakeTimer{clk: c, d: d, at: c.now.Add(d), c: make(chan time.Time, 1)}
	c.pending = append(c.pending, t)
	c.mu.Unlock()
	c.created <- t
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	for i, p := range t.clk.pending {
		if p == t {
			t.clk.pending = append(t.clk.pending[:i], t.clk.pending[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock by d and fires the timers due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.pending[:0]
	for _, t := range c.pending {
		if t.at.After(c.now) {
			keep = append(keep, t)
			continue
		}
		t.c <- c.now
	}
	c.pending = keep
}

// next returns the next timer made, waiting for it up to a generous deadline: a
// deadline for a broken test, not a timing the test relies on.
func (c *fakeClock) next(t *testing.T) *fakeTimer {
	t.Helper()
	select {
	case tm := <-c.created:
		return tm
	case <-time.After(10 * time.Second):
		t.Fatal("no timer made within 10s")
		return nil
	}
}

// noTimer fails if a timer was made and not yet taken with next.
func (c *fakeClock) noTimer(t *testing.T) {
	t.Helper()
	select {
	case tm := <-c.created:
		t.Fatalf("unexpected timer of %v", tm.d)
	default:
	}
}
