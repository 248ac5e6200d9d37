package refresh

import "time"

// Clock is the time a Task reads and waits on. The zero Config uses the system
// clock; tests pass a fake one that moves only when told, so they never sleep.
type Clock interface {
	// Now is the current time; it stamps Stats.LastSuccess and Stats.LastErrorAt.
	Now() time.Time
	// NewTimer returns a timer whose channel receives once, d from now.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer from a Clock, like *time.Timer.
type Timer interface {
	// C is the channel the timer fires on.
	C() <-chan time.Time
	// Stop prevents the timer from firing, as time.Timer.Stop.
	Stop() bool
}

// systemClock is the Clock of the time package.
type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

var _ Clock = systemClock{}
