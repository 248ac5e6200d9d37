package breaker

import (
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	errNet  = errors.New("network")
	errBusy = errors.New("congestion")
	errPerm = errors.New("permanent")
)

type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) record(_ string, from, to State) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.got = append(tr.got, from.String()+"→"+to.String())
}

func (tr *transitions) list() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]string(nil), tr.got...)
}

func newTest(t *testing.T, openFor time.Duration, tr *transitions) Breaker {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name = "peer"
	cfg.OpenFor = openFor
	cfg.IsFailure = func(err error) bool { return errors.Is(err, errNet) }
	cfg.IsExcluded = func(err error) bool { return errors.Is(err, errBusy) }
	cfg.OnStateChange = tr.record
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fail(b Breaker, err error, n int) {
	for range n {
		b.Do(func() error { return err })
	}
}

func TestTripsOnConsecutiveNetworkFailuresOnly(t *testing.T) {
	cases := []struct {
		name  string
		calls []error
		want  State
	}{
		{"4 network failures stay closed", []error{errNet, errNet, errNet, errNet}, Closed},
		{"5 network failures trip", []error{errNet, errNet, errNet, errNet, errNet}, Open},
		{"a success resets the count", []error{errNet, errNet, errNet, errNet, nil, errNet}, Closed},
		{"a permanent error is the peer answering: resets", []error{errNet, errNet, errNet, errNet, errPerm, errNet}, Closed},
		{"congestion neither counts nor resets", []error{errNet, errNet, errBusy, errBusy, errNet, errNet, errNet}, Open},
		{"congestion alone never trips", []error{errBusy, errBusy, errBusy, errBusy, errBusy, errBusy}, Closed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newTest(t, time.Hour, &transitions{})
			for _, err := range c.calls {
				if got := b.Do(func() error { return err }); !errors.Is(got, err) && err != nil {
					t.Fatalf("Do returned %v, want the call's %v", got, err)
				}
			}
			if b.State() != c.want {
				t.Fatalf("state %s, want %s", b.State(), c.want)
			}
		})
	}
}

func TestOpenRefusesAndHolds(t *testing.T) {
	b := newTest(t, time.Hour, &transitions{})
	fail(b, errNet, 5)
	called := false
	if err := b.Do(func() error { called = true; return nil }); !errors.Is(err, ErrOpen) || called {
		t.Fatalf("open: err %v called %v; want ErrOpen without calling", err, called)
	}
	if h := b.Hold(time.Now()); h < 59*time.Minute || h > time.Hour {
		t.Fatalf("Hold = %s, want about the open period", h)
	}
	if h := b.Hold(time.Now().Add(2 * time.Hour)); h != time.Millisecond {
		t.Fatalf("Hold past the period = %s, want a short re-check", h)
	}
}

// waitState polls, because gobreaker reads time.Now itself.
func waitState(t *testing.T, b Breaker, want State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("state %s, want %s", b.State(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestHalfOpenProbe(t *testing.T) {
	t.Run("probe succeeds: closed", func(t *testing.T) {
		tr := &transitions{}
		b := newTest(t, 20*time.Millisecond, tr)
		fail(b, errNet, 5)
		waitState(t, b, HalfOpen)
		if h := b.Hold(time.Now()); h != 0 {
			t.Fatalf("half-open Hold = %s, want 0 (the probe may go)", h)
		}
		release := make(chan struct{})
		inside := make(chan struct{})
		probeDone := make(chan error)
		go func() { probeDone <- b.Do(func() error { close(inside); <-release; return nil }) }()
		<-inside // the probe holds the only half-open slot
		if err := b.Do(func() error { return nil }); !errors.Is(err, ErrOpen) {
			t.Fatalf("second call while the probe is out: %v, want ErrOpen", err)
		}
		close(release)
		if err := <-probeDone; err != nil {
			t.Fatalf("probe: %v", err)
		}
		if b.State() != Closed {
			t.Fatalf("after a good probe: %s, want closed", b.State())
		}
		got := tr.list()
		if got[0] != "closed→open" || got[1] != "open→half-open" || got[len(got)-1] != "half-open→closed" {
			t.Fatalf("transitions %v", got)
		}
	})
	t.Run("probe fails: open again", func(t *testing.T) {
		b := newTest(t, 20*time.Millisecond, &transitions{})
		fail(b, errNet, 5)
		waitState(t, b, HalfOpen)
		fail(b, errNet, 1)
		if b.State() != Open {
			t.Fatalf("after a failed probe: %s, want open", b.State())
		}
	})
	t.Run("congested probe frees its slot", func(t *testing.T) {
		b := newTest(t, 20*time.Millisecond, &transitions{})
		fail(b, errNet, 5)
		waitState(t, b, HalfOpen)
		fail(b, errBusy, 1)
		if err := b.Do(func() error { return nil }); err != nil || b.State() != Closed {
			t.Fatalf("after an excluded probe, next probe: %v state %s; want it let through and closed", err, b.State())
		}
	})
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{{OpenFor: time.Second, Probes: 1}, {Failures: 1, Probes: 1}, {Failures: 1, OpenFor: time.Second}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted an invalid config", c)
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Closed: "closed", Open: "open", HalfOpen: "half-open"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
}

func TestFake(t *testing.T) {
	f := &Fake{}
	f.Set(Open, time.Second)
	if err := f.Do(func() error { return nil }); !errors.Is(err, ErrOpen) || f.Hold(time.Now()) != time.Second {
		t.Fatal("open fake must refuse and hold")
	}
	f.Set(Closed, 0)
	f.Do(func() error { return errNet })
	if calls, refused, failures := f.Counts(); calls != 1 || refused != 1 || failures != 1 {
		t.Fatalf("counts %d %d %d", calls, refused, failures)
	}
}
