package mesh

import (
	"sync"
	"testing"
	"time"
)

// fakeAfter is a Config.After that moves only when the test says: every wait the mesh
// starts is kept, with the duration it asked for, until the test fires it. So a test
// drives the anti-entropy interval, the removal grace and the bootstrap's timeout
// without sleeping.
type fakeAfter struct {
	mu    sync.Mutex
	waits []fakeWait    // guarded by mu: started, not fired
	added chan struct{} // cap 1: a wait was added
}

type fakeWait struct {
	d  time.Duration
	ch chan time.Time
}

func newFakeAfter() *fakeAfter { return &fakeAfter{added: make(chan struct{}, 1)} }

// After implements Config.After.
func (f *fakeAfter) After(d time.Duration) <-chan time.Time {
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

// fire ends the waits whose duration match accepts, once there is at least one,
// failing the test if none is started within a named deadline. It returns how many
// it ended.
func (f *fakeAfter) fire(t *testing.T, what string, match func(time.Duration) bool) int {
	t.Helper()
	const within = 10 * time.Second // generous: a busy machine
	deadline := time.After(within)
	for {
		f.mu.Lock()
		kept, fired := f.waits[:0], 0
		for _, w := range f.waits {
			if match(w.d) {
				w.ch <- time.Time{}
				fired++
				continue
			}
			kept = append(kept, w)
		}
		clear(f.waits[len(kept):])
		f.waits = kept
		f.mu.Unlock()
		if fired > 0 {
			return fired
		}
		select {
		case <-f.added:
		case <-deadline:
			t.Fatalf("no wait for %s started within %s", what, within)
		}
	}
}

// atLeast matches the waits of d or longer.
func atLeast(d time.Duration) func(time.Duration) bool {
	return func(w time.Duration) bool { return w >= d }
}
