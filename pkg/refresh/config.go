package refresh

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
)

// maxTimeout is the longest default attempt timeout: Go's and glibc's resolvers give
// up on a DNS server after timeout:5 × attempts:2 = 10s, so a lookup that has not
// answered by then will not.
const maxTimeout = 10 * time.Second

// Config configures a Task. Start copies it; changing it afterwards has no effect.
type Config struct {
	// Name identifies the task in its log lines ("peers-dns").
	Name string
	// Interval is the base interval: the wait between the end of one attempt and the
	// start of the next while attempts succeed. 30s (--peers-refresh): a
	// Kubernetes rollout replaces a pod in tens of seconds, and the DNS server sees one
	// query per node per 30s.
	Interval time.Duration
	// MaxFactor caps the interval at Interval*MaxFactor after consecutive timeouts.
	// 10 (Eureka's expBackOffBound): a DNS server that keeps timing out
	// is asked every 5 minutes at worst, never given up on.
	MaxFactor int
	// Timeout bounds one attempt: at Timeout the attempt's context is cancelled and
	// the attempt counts as a timeout. 0 means min(Interval, 10s): 10s is when a
	// resolver gives up on a server itself (timeout:5 attempts:2), and an attempt
	// should not outlast the interval it is scheduled on.
	Timeout time.Duration
	// IsTimeout says whether an error returned by Func is a timeout. nil means
	// IsTimeout, the function of this package.
	IsTimeout func(error) bool
	// Clock is the time the Task reads and waits on. nil means the system clock.
	Clock Clock
	// Logger gets one line per failed or timed-out attempt and one when attempts
	// succeed again; at most one an interval. nil discards them.
	Logger *slog.Logger
}

// DefaultConfig returns the --peers-dns schedule: every 30s, up to 10× that after
// timeouts, each attempt bounded by 10s.
func DefaultConfig() Config {
	return Config{Interval: 30 * time.Second, MaxFactor: 10}
}

// Validate checks c as Start would, without changing it: a caller that starts the
// Task later refuses a bad Config at its own start.
func (c Config) Validate() error { return c.validate() }

// validate checks c and fills its zero-valued defaults.
func (c *Config) validate() error {
	if c.Interval <= 0 {
		return configerr.New("refresh.Config.Interval", "must be > 0, got %v", c.Interval)
	}
	if c.MaxFactor < 1 {
		return configerr.New("refresh.Config.MaxFactor", "must be >= 1, got %d", c.MaxFactor)
	}
	if c.Interval > math.MaxInt64/time.Duration(c.MaxFactor) {
		return configerr.New("refresh.Config.MaxFactor", "Interval (%v) × MaxFactor (%d) overflows a time.Duration", c.Interval, c.MaxFactor)
	}
	if c.Timeout < 0 {
		return configerr.New("refresh.Config.Timeout", "must be >= 0 (0: min(Interval, 10s)), got %v", c.Timeout)
	}
	if c.Timeout == 0 {
		c.Timeout = min(c.Interval, maxTimeout)
	}
	if c.IsTimeout == nil {
		c.IsTimeout = IsTimeout
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// IsTimeout is the default Config.IsTimeout: err is context.DeadlineExceeded, or
// something in its chain has a Timeout() bool method that says true (net.Error,
// *net.DNSError, discovery.ErrTimeout).
func IsTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
