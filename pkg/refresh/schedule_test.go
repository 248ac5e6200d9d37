package refresh

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
)

func TestScheduleRecord(t *testing.T) {
	const S, T, F = Success, Timeout, Failure
	s := time.Second
	for _, tc := range []struct {
		name     string
		base     time.Duration
		factor   int
		outcomes []Outcome
		want     []time.Duration // the interval after each outcome
		timeouts int             // at the end
	}{
		{"successes stay at base", 30 * s, 10, []Outcome{S, S}, []time.Duration{30 * s, 30 * s}, 0},
		{"timeouts double up to 10x", 30 * s, 10, []Outcome{T, T, T, T, T},
			[]time.Duration{60 * s, 120 * s, 240 * s, 300 * s, 300 * s}, 5},
		{"a success resets", 30 * s, 10, []Outcome{T, T, S, T}, []time.Duration{60 * s, 120 * s, 30 * s, 60 * s}, 1},
		{"a failure at base keeps base", 30 * s, 10, []Outcome{F, F}, []time.Duration{30 * s, 30 * s}, 0},
		{"a failure keeps a doubled interval and the count", 30 * s, 10, []Outcome{T, F, F, T},
			[]time.Duration{60 * s, 60 * s, 60 * s, 120 * s}, 2},
		{"factor 1 never backs off", 30 * s, 1, []Outcome{T, T}, []time.Duration{30 * s, 30 * s}, 2},
		{"a cap that is not a power of two", s, 3, []Outcome{T, T, T}, []time.Duration{2 * s, 3 * s, 3 * s}, 3},
		{"no overflow near the largest duration", math.MaxInt64 / 4, 4, []Outcome{T, T, T},
			[]time.Duration{math.MaxInt64 / 4 * 2, math.MaxInt64 / 4 * 4, math.MaxInt64 / 4 * 4}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newSchedule(tc.base, tc.factor)
			for i, o := range tc.outcomes {
				if got := sc.record(o); got != tc.want[i] || sc.interval != got {
					t.Fatalf("after outcome %d (%v): interval %v (field %v), want %v", i, o, got, sc.interval, tc.want[i])
				}
				checkSchedule(t, sc)
			}
			if sc.timeouts != tc.timeouts {
				t.Fatalf("timeouts = %d, want %d", sc.timeouts, tc.timeouts)
			}
		})
	}
}

// checkSchedule checks the invariants written on schedule's fields.
func checkSchedule(t *testing.T, s schedule) {
	t.Helper()
	want := s.base
	for range s.timeouts {
		want = doubled(want, s.max)
	}
	if s.base <= 0 || s.max < s.base || s.interval != want || s.interval < s.base || s.interval > s.max {
		t.Fatalf("invariants broken: %+v (want interval %v)", s, want)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string // the refused field; "" if valid
	}{
		{"default", func(*Config) {}, ""},
		{"zero interval", func(c *Config) { c.Interval = 0 }, "refresh.Config.Interval"},
		{"zero factor", func(c *Config) { c.MaxFactor = 0 }, "refresh.Config.MaxFactor"},
		{"overflowing cap", func(c *Config) { c.Interval = math.MaxInt64 / 2 }, "refresh.Config.MaxFactor"},
		{"negative timeout", func(c *Config) { c.Timeout = -1 }, "refresh.Config.Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.validate()
			var ce *configerr.Error
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tc.field != "" && (!errors.As(err, &ce) || ce.Field != tc.field):
				t.Fatalf("validate = %v, want an error on %s", err, tc.field)
			}
		})
	}
}

func TestDefaultTimeout(t *testing.T) {
	for _, tc := range []struct{ interval, want time.Duration }{
		{30 * time.Second, 10 * time.Second},
		{10 * time.Second, 10 * time.Second},
		{2 * time.Second, 2 * time.Second},
	} {
		c := DefaultConfig()
		c.Interval = tc.interval
		if err := c.validate(); err != nil || c.Timeout != tc.want {
			t.Errorf("Interval %v: Timeout %v (err %v), want %v", tc.interval, c.Timeout, err, tc.want)
		}
	}
}

func TestIsTimeout(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("lookup: %w", context.DeadlineExceeded), true},
		{&net.DNSError{Err: "i/o timeout", IsTimeout: true}, true},
		{fmt.Errorf("discovery: %w", &net.DNSError{Err: "i/o timeout", IsTimeout: true}), true},
		{os.ErrDeadlineExceeded, true},
		{&net.DNSError{Err: "no such host", IsNotFound: true}, false},
		{context.Canceled, false},
		{errors.New("boom"), false},
	} {
		if got := IsTimeout(tc.err); got != tc.want {
			t.Errorf("IsTimeout(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
