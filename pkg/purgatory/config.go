package purgatory

import (
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/timingwheel"
)

// Config configures a Purgatory. New copies it.
type Config struct {
	// Wheel keeps the operations' deadlines. The caller owns it: it creates
	// it, drives it (timingwheel.StartDriver, or Advance in tests) and may
	// share it between purgatories. Expiry callbacks run on its driver.
	Wheel *timingwheel.Wheel
	// PurgeInterval is how many completed operations may pile up in the watch
	// lists before a sweep removes them (Kafka's purgeInterval). Completed
	// operations are removed eagerly only from the list of the key that
	// completed them; the sweep catches the rest (other keys, expiries).
	PurgeInterval int
}

// DefaultConfig returns Kafka's defaults. Wheel is left nil: the caller
// supplies the wheel it drives.
func DefaultConfig() Config {
	return Config{
		// Kafka's purgeInterval (delayed produce/fetch default 1000): a sweep
		// is O(watched entries), so sweep rarely, yet bound the garbage to a
		// thousand small operations.
		PurgeInterval: 1000,
	}
}

func (c Config) validate() error {
	if c.Wheel == nil {
		return configerr.New("purgatory.Config.Wheel", "must be set")
	}
	if c.PurgeInterval <= 0 {
		return configerr.New("purgatory.Config.PurgeInterval", "must be > 0, got %d", c.PurgeInterval)
	}
	return nil
}
