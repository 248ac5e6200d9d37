package refresh

import "time"

// Outcome is how an attempt ended, as the schedule sees it.
type Outcome int

// The three outcomes of seed 001's TimedSupervisorTask.
const (
	// Success: Func returned nil. The interval goes back to the base.
	Success Outcome = iota
	// Timeout: the attempt ran past Config.Timeout, or Func returned an error that
	// Config.IsTimeout calls a timeout. The interval doubles, up to the cap.
	Timeout
	// Failure: any other error. The interval stays as it is (Eureka's rule: only
	// slowness is a reason to ask less often).
	Failure
)

// String gives the names the logs use: "success", "timeout", "failure".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Timeout:
		return "timeout"
	case Failure:
		return "failure"
	}
	return "outcome(?)"
}

// schedule is the deterministic heart of a Task: seed 001's interval rule, driven by
// explicit outcomes. It reads no clock and starts nothing; the Task's goroutine owns
// it, and tests drive it directly.
type schedule struct {
	base time.Duration // Config.Interval. Invariant: base > 0
	max  time.Duration // base * Config.MaxFactor. Invariant: max >= base
	// interval is the wait between the end of one attempt and the start of the next.
	// Invariant: interval == min(base * 2^timeouts, max), so base <= interval <= max.
	interval time.Duration
	// timeouts counts the timeouts since the last success (or since the start).
	// Failures neither count nor reset it, as they leave interval alone.
	// Invariant: timeouts >= 0.
	timeouts int
}

func newSchedule(base time.Duration, factor int) schedule {
	return schedule{base: base, max: base * time.Duration(factor), interval: base}
}

// record applies an attempt's outcome and returns the interval to wait before the
// next attempt.
func (s *schedule) record(o Outcome) time.Duration {
	switch o {
	case Success:
		s.interval, s.timeouts = s.base, 0
	case Timeout:
		s.interval, s.timeouts = doubled(s.interval, s.max), s.timeouts+1
	}
	return s.interval
}

// doubled is min(2d, max) for 0 < d <= max, without overflow.
func doubled(d, max time.Duration) time.Duration {
	if d > max/2 {
		return max
	}
	return 2 * d
}
