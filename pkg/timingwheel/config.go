package timingwheel

import (
	"time"

	"github.com/fanout/fanout/pkg/configerr"
)

// maxSlots bounds Config.Slots. A level is scanned slot by slot when the clock
// jumps past its whole span, so a huge level would make long jumps slow.
const maxSlots = 1 << 16

// Config configures a Wheel. New copies it; changing it afterwards has no effect.
type Config struct {
	// Tick is the width of one bucket of the finest level. It is the grain at
	// which work is grouped, not a rounding of deadlines: a timer never runs
	// before its deadline, and runs at the first Advance that reaches it.
	Tick time.Duration
	// Slots is the number of buckets in every level. Level i spans
	// Tick*Slots^(i+1); levels are added when a deadline needs them.
	Slots int
	// Start is the wheel's time zero. The wheel never reads the clock, so the
	// caller must set it, usually to now() of the clock that drives Advance.
	// Deadlines are kept as offsets from Start, and so must lie within about
	// 290 years of it; later deadlines are clamped (they never run).
	Start time.Time
}

// DefaultConfig returns seed 003's (Kafka's SystemTimer) defaults. Start is left
// zero: the caller sets it from its clock.
func DefaultConfig() Config {
	return Config{
		// Kafka's tickMs: fine enough for request timeouts measured in
		// milliseconds, coarse enough that a 1ms driver does little per tick.
		Tick: time.Millisecond,
		// Kafka's wheelSize: 20 slots a level, so levels span 20ms, 400ms,
		// 8s, 160s, 53min, ... and a 5s ack timeout lives on the third level.
		Slots: 20,
	}
}

func (c Config) validate() error {
	if c.Tick <= 0 {
		return configerr.New("timingwheel.Config.Tick", "must be > 0, got %v", c.Tick)
	}
	if c.Slots < 2 || c.Slots > maxSlots {
		return configerr.New("timingwheel.Config.Slots", "must be in [2, %d], got %d", maxSlots, c.Slots)
	}
	if c.Start.IsZero() {
		return configerr.New("timingwheel.Config.Start", "must be set (the wheel never reads the clock)")
	}
	return nil
}
