// Package fakeclock is a test clock for the After funcs of fanout.Config and
// mesh.Config: time moves only when the test fires a wait, so a test drives the
// anti-entropy interval, the removal grace or the readiness check's retries without
// sleeping, and waits on the waits the code starts instead of polling.
package fakeclock

import (
	"sync"
	"testing"
	"time"
)

// After is a Config.After that moves only when the test says: every wait the code
// starts is kept, with the duration it asked for, until the test fires it. Safe for
// concurrent use.
type After struct {
	mu    sync.Mutex
	waits []fakeWait    // guarded by mu: started, not fired
	added chan struct{} // cap 1: a wait was added
}

type fakeWait struct {
	d  time.Duration
	ch chan time.Time
}

// New returns an After with no waits.
func New() *After { return &After{added: make(chan struct{}, 1)} }

// After implements Config.After: its channel receives once the test fires it.
func (f *After) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	f.mu.Lock()
	f.waits = append(f.waits, fakeWait{d, ch})
	f.mu.Unlock()
	select {
	case f.added <- struct{}{}:
	default:
	}
	return ch
}

// Fire ends the waits whose duration match accepts, once there is at least one
// (waiting for one to start), failing the test if none starts within a named
// deadline. It returns how many it ended.
func (f *After) Fire(t testing.TB, what string, match func(time.Duration) bool) int {
	t.Helper()
	return f.await(t, what, match, true)
}

// Started waits until a wait whose duration match accepts has started, and leaves it
// pending, failing the test if none starts within a named deadline.
func (f *After) Started(t testing.TB, what string, match func(time.Duration) bool) {
	t.Helper()
	f.await(t, what, match, false)
}

// await waits until waits that match are pending and, if fire, ends them.
func (f *After) await(t testing.TB, what string, match func(time.Duration) bool, fire bool) int {
	t.Helper()
	const within = 10 * time.Second // generous: a busy machine
	deadline := time.After(within)
	for {
		if n := f.take(match, fire); n > 0 {
			return n
		}
		select {
		case <-f.added:
		case <-deadline:
			t.Fatalf("no wait for %s started within %s", what, within)
		}
	}
}

// take counts the pending waits that match and, if fire, ends them.
func (f *After) take(match func(time.Duration) bool, fire bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept, n := f.waits[:0], 0
	for _, w := range f.waits {
		if !match(w.d) {
			kept = append(kept, w)
			continue
		}
		n++
		if !fire {
			kept = append(kept, w)
			continue
		}
		w.ch <- time.Time{}
	}
	clear(f.waits[len(kept):])
	f.waits = kept
	return n
}

// AtLeast matches the waits of d or longer.
func AtLeast(d time.Duration) func(time.Duration) bool {
	return func(w time.Duration) bool { return w >= d }
}

// Exactly matches the waits of d.
func Exactly(d time.Duration) func(time.Duration) bool {
	return func(w time.Duration) bool { return w == d }
}
