package breaker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
	"github.com/sony/gobreaker/v2"
)

// ErrOpen is returned by Do when the breaker refuses the call: it is open, or half-open
// with every probe slot taken.
var ErrOpen = errors.New("breaker: open")

// State is a breaker's state.
type State int

// The three states of a circuit breaker.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String gives the names GetStatus uses: "closed", "open", "half-open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Breaker guards the calls to one peer.
type Breaker interface {
	// Do runs call unless the breaker refuses it, in which case it returns ErrOpen
	// without calling. Otherwise it returns call's error.
	Do(call func() error) error
	// State is the current state.
	State() State
	// Hold is how long dispatch should wait before the breaker lets a call through
	// (0 unless open). It satisfies batcher.Gate.
	Hold(now time.Time) time.Duration
}

// Config configures one breaker. It is copied by New.
type Config struct {
	// Name identifies the breaker in OnStateChange (the peer address).
	Name string
	// Failures is the number of consecutive failures that trips the breaker. 5: one
	// lost packet or a restart blip does not trip it, a dead peer does within a second.
	Failures uint32
	// OpenFor is how long the breaker stays open before probing. 5s: long enough that
	// a dead peer costs nothing, short enough that a restarted one is back quickly.
	OpenFor time.Duration
	// Probes is how many calls half-open lets through; all must succeed to close. 1:
	// one batch is enough to tell whether the peer is back.
	Probes uint32
	// IsFailure says whether an error counts against the breaker. Errors for which it
	// returns false, and Excluded returns false, count as successes. Default: any
	// non-nil error.
	IsFailure func(err error) bool
	// IsExcluded says whether an error counts at all. Default: none excluded.
	IsExcluded func(err error) bool
	// OnStateChange, if set, is told about every transition. It runs under the
	// breaker's lock: it must not call the breaker.
	OnStateChange func(name string, from, to State)
}

// DefaultConfig returns the defaults: trip after 5 consecutive failures, stay
// open 5s, then let 1 probe through.
func DefaultConfig() Config {
	return Config{Failures: 5, OpenFor: 5 * time.Second, Probes: 1}
}

// Validate checks c as New would: a caller that makes breakers later (a peer set
// that grows) refuses a bad config at its own start.
func (c Config) Validate() error { return c.validate() }

func (c Config) validate() error {
	var errs []error
	if c.Failures == 0 {
		errs = append(errs, configerr.New("breaker.Config.Failures", "must be > 0"))
	}
	if c.OpenFor <= 0 {
		errs = append(errs, configerr.New("breaker.Config.OpenFor", "must be > 0, got %s", c.OpenFor))
	}
	if c.Probes == 0 {
		errs = append(errs, configerr.New("breaker.Config.Probes", "must be > 0"))
	}
	return errors.Join(errs...)
}

// gobreakerBreaker is the Breaker over gobreaker.
type gobreakerBreaker struct {
	cb      *gobreaker.CircuitBreaker[struct{}]
	openFor time.Duration

	mu       sync.Mutex
	openedAt time.Time // guarded by mu; when the breaker last tripped
}

var _ Breaker = (*gobreakerBreaker)(nil)

// New returns a breaker backed by gobreaker.
func New(cfg Config) (Breaker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &gobreakerBreaker{openFor: cfg.OpenFor}
	isFailure := cfg.IsFailure
	if isFailure == nil {
		isFailure = func(err error) bool { return err != nil }
	}
	st := gobreaker.Settings{
		Name:         cfg.Name,
		MaxRequests:  cfg.Probes,
		Timeout:      cfg.OpenFor,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= cfg.Failures },
		IsSuccessful: func(err error) bool { return !isFailure(err) },
		IsExcluded:   cfg.IsExcluded,
		OnStateChange: func(name string, from, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				b.mu.Lock()
				b.openedAt = time.Now() // gobreaker's own clock, which decides the timeout
				b.mu.Unlock()
			}
			if cfg.OnStateChange != nil {
				cfg.OnStateChange(name, fromGobreaker(from), fromGobreaker(to))
			}
		},
	}
	b.cb = gobreaker.NewCircuitBreaker[struct{}](st)
	return b, nil
}

func fromGobreaker(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	}
	return Closed
}

func (b *gobreakerBreaker) Do(call func() error) error {
	_, err := b.cb.Execute(func() (struct{}, error) { return struct{}{}, call() })
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return fmt.Errorf("%w: %v", ErrOpen, err)
	}
	return err
}

func (b *gobreakerBreaker) State() State { return fromGobreaker(b.cb.State()) }

func (b *gobreakerBreaker) Hold(now time.Time) time.Duration {
	if b.State() != Open {
		return 0
	}
	b.mu.Lock()
	left := b.openedAt.Add(b.openFor).Sub(now)
	b.mu.Unlock()
	// The open period is over by our clock but gobreaker has not moved on yet (its
	// clock is time.Now): ask again shortly.
	return max(left, time.Millisecond)
}
