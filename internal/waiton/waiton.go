// Package waiton is how tests wait for what a node's goroutines do: on the channel of
// the next change that can make a condition true, never on a poll or a sleep, within
// one generous deadline. pkg/fanout's, pkg/mesh's and pkg/grpcapi's tests share it.
package waiton

import (
	"sync"
	"testing"
	"time"
)

// Timeout bounds every wait: generous, for a busy machine (2 cores, -race, other
// builds).
const Timeout = 10 * time.Second

// On waits until cond holds: it checks cond, then again each time the channel next
// returned before that check is closed, failing the test after Timeout. next must
// return a channel closed at the next change that can make cond true (e.g.
// Node.SubscribersChanged), asked for before cond is read, so that no change between
// the two is missed.
func On(t testing.TB, what string, next func() <-chan struct{}, cond func() bool) {
	t.Helper()
	deadline := time.After(Timeout)
	for {
		ch := next()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", Timeout, what)
		}
	}
}

// Tally counts something a node's goroutines do that a test waits for (a fake peer's
// calls, fates, commits, log lines) and wakes the waiters at each. The zero value is
// ready; safe for concurrent use.
type Tally struct {
	mu sync.Mutex
	n  int
	ch chan struct{} // closed and cleared at each Add; made by the first waiter after it
}

// Add counts one.
func (c *Tally) Add() {
	c.mu.Lock()
	c.n++
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	c.mu.Unlock()
}

// Count is how many were added.
func (c *Tally) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Changed is an On next: closed at the next Add.
func (c *Tally) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Await waits until at least n were added.
func (c *Tally) Await(t testing.TB, what string, n int) {
	t.Helper()
	On(t, what, c.Changed, func() bool { return c.Count() >= n })
}
