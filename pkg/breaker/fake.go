package breaker

import (
	"sync"
	"time"
)

// Fake is a Breaker whose state the test sets. It counts the calls it let through and
// the failures it saw.
type Fake struct {
	mu       sync.Mutex
	state    State         // guarded by mu
	hold     time.Duration // guarded by mu; what Hold reports while open
	calls    int           // guarded by mu
	refused  int           // guarded by mu
	failures int           // guarded by mu
	// IsFailure decides which errors Failures counts; default any non-nil error.
	IsFailure func(error) bool
}

var _ Breaker = (*Fake)(nil)

// Set puts the fake in state s; while Open, Hold reports hold.
func (f *Fake) Set(s State, hold time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state, f.hold = s, hold
}

// Do refuses with ErrOpen while Open, and calls call otherwise.
func (f *Fake) Do(call func() error) error {
	f.mu.Lock()
	if f.state == Open {
		f.refused++
		f.mu.Unlock()
		return ErrOpen
	}
	f.calls++
	f.mu.Unlock()
	err := call()
	if err != nil && (f.IsFailure == nil || f.IsFailure(err)) {
		f.mu.Lock()
		f.failures++
		f.mu.Unlock()
	}
	return err
}

// State is the state last Set.
func (f *Fake) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

// Hold reports the hold given to Set while Open.
func (f *Fake) Hold(time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == Open {
		return f.hold
	}
	return 0
}

// Counts returns the calls let through, refused, and failures seen.
func (f *Fake) Counts() (calls, refused, failures int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.refused, f.failures
}
