package batcher

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// ruleCase is one scripted run of the core: cfg adjusts the configuration, run
// drives it and returns the batches it saw, and the rest is checked at the end.
type ruleCase struct {
	name        string
	cfg         func(*Config[int])
	run         func(h *harness) [][]string
	wantBatches [][]string
	wantPending []string
	wantFates   map[int]Fate // values that must have exactly this one fate
	wantStats   Stats        // only the counters are compared
}

func (tc ruleCase) test(t *testing.T) {
	h := newHarness(t, tc.cfg)
	got := tc.run(h)
	if !equalBatches(got, tc.wantBatches) {
		t.Errorf("batches = %q, want %q", got, tc.wantBatches)
	}
	if p := h.pending(); !slices.Equal(p, tc.wantPending) {
		t.Errorf("pending = %q, want %q", p, tc.wantPending)
	}
	for val, fate := range tc.wantFates {
		if got := h.fates.only(val); got != fate {
			t.Errorf("fate of %d = %v, want exactly %v", val, h.fates[val], fate)
		}
	}
	if n := len(h.fates); n != len(tc.wantFates) {
		t.Errorf("%d tasks have a fate, want %d: %v", n, len(tc.wantFates), h.fates)
	}
	if got := counters(h.c.stats()); got != counters(tc.wantStats) {
		t.Errorf("counters = %+v, want %+v", got, tc.wantStats)
	}
}

// counters keeps only the counters of s.
func counters(s Stats) Stats {
	s.AcceptorQueue, s.ReprocessQueue, s.Pending, s.InFlight, s.IdleWorkers = 0, 0, 0, 0, 0
	s.PendingBytes = 0
	return s
}

func equalBatches(a, b [][]string) bool {
	return slices.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

func TestCoreAccept(t *testing.T) {
	for _, tc := range []ruleCase{{
		name: "coalescing keeps place",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("a", 3))
			return nil
		},
		wantPending: []string{"a:3", "b:2"},
		wantFates:   map[int]Fate{1: FateOverridden},
		wantStats:   Stats{Accepted: 3, Overridden: 1},
	}, {
		name: "overflow evicts oldest",
		cfg:  func(c *Config[int]) { c.MaxBuffer, c.MaxBatch = 3, 1 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("c", 3))
			h.offer(tk("d", 4))
			return nil
		},
		wantPending: []string{"b:2", "c:3", "d:4"},
		wantFates:   map[int]Fate{1: FateOverflow},
		wantStats:   Stats{Accepted: 4, Overflow: 1},
	}, {
		name: "override when full evicts nothing",
		cfg:  func(c *Config[int]) { c.MaxBuffer, c.MaxBatch = 2, 1 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("a", 3))
			return nil
		},
		wantPending: []string{"a:3", "b:2"},
		wantFates:   map[int]Fate{1: FateOverridden},
		wantStats:   Stats{Accepted: 3, Overridden: 1},
	}, {
		name: "an override keeps the slot's age",
		cfg:  func(c *Config[int]) { c.MaxBatchingDelay = 100 * time.Millisecond },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(60 * time.Millisecond)
			h.offer(tk("a", 2))
			h.advance(40 * time.Millisecond)
			return h.assign()
		},
		wantBatches: [][]string{{"a:2"}},
		wantFates:   map[int]Fate{1: FateOverridden},
		wantStats:   Stats{Accepted: 2, Overridden: 1},
	}} {
		t.Run(tc.name, tc.test)
	}
}

func TestCoreReprocess(t *testing.T) {
	congestion := Result{Class: Congestion}
	for _, tc := range []ruleCase{{
		name: "goes to the front in original order",
		cfg:  func(c *Config[int]) { c.MaxBatch = 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("c", 3))
			got := h.assign()
			h.offer(tk("d", 4))
			h.complete(0, congestion)
			return got
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantPending: []string{"a:1", "b:2", "c:3", "d:4"},
		wantStats:   Stats{Accepted: 4, Replayed: 2, Congestion: 2},
	}, {
		name: "batches keep the order they came back in",
		cfg:  func(c *Config[int]) { c.MaxBatch, c.Workers = 1, 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("c", 3))
			got := h.assign()
			for _, b := range h.out {
				b.result = Result{Class: NetworkFailure}
				h.c.complete(b, h.now)
			}
			h.out = nil
			h.c.drainReprocess(h.now)
			return got
		},
		wantBatches: [][]string{{"a:1"}, {"b:2"}},
		wantPending: []string{"a:1", "b:2", "c:3"},
		wantStats:   Stats{Accepted: 3, Replayed: 2, Transient: 2},
	}, {
		name: "overridden by a newer pending task",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2))
			got := h.assign()
			h.offer(tk("a", 3))
			h.complete(0, congestion)
			return got
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantPending: []string{"b:2", "a:3"},
		wantFates:   map[int]Fate{1: FateOverridden},
		wantStats:   Stats{Accepted: 3, Replayed: 2, Congestion: 2, Overridden: 1},
	}, {
		name: "expired retry is dropped",
		run: func(h *harness) [][]string {
			h.offer(tkExp("a", 1, time.Second), tk("b", 2))
			got := h.assign()
			h.advance(time.Second)
			h.complete(0, Result{Class: NetworkFailure})
			return got
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantPending: []string{"b:2"},
		wantFates:   map[int]Fate{1: FateExpired},
		wantStats:   Stats{Accepted: 2, Replayed: 2, Transient: 2, Expired: 1},
	}, {
		name: "retries dropped first when pending is full",
		cfg:  func(c *Config[int]) { c.MaxBuffer, c.MaxBatch = 2, 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2))
			got := h.assign()
			h.offer(tk("c", 3), tk("d", 4))
			h.complete(0, congestion)
			return got
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantPending: []string{"c:3", "d:4"},
		wantFates:   map[int]Fate{1: FateOverflow, 2: FateOverflow},
		wantStats:   Stats{Accepted: 4, Replayed: 2, Congestion: 2, Overflow: 2},
	}, {
		name: "retries fill pending, the rest overflow",
		cfg:  func(c *Config[int]) { c.MaxBuffer, c.MaxBatch = 3, 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2))
			got := h.assign()
			h.offer(tk("c", 3), tk("d", 4))
			h.complete(0, congestion)
			return got
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantPending: []string{"b:2", "c:3", "d:4"},
		wantFates:   map[int]Fate{1: FateOverflow},
		wantStats:   Stats{Accepted: 4, Replayed: 2, Congestion: 2, Overflow: 1},
	}, {
		name: "a retry keeps its age",
		cfg:  func(c *Config[int]) { c.MaxBatchingDelay, c.CongestionRetryDelay = time.Second, 0 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(time.Second)
			got := h.assign()
			h.complete(0, congestion)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}, {"a:1"}},
		wantStats:   Stats{Accepted: 1, Replayed: 1, Congestion: 1},
	}} {
		t.Run(tc.name, tc.test)
	}
}

func TestCoreAssign(t *testing.T) {
	const delay = 500 * time.Millisecond
	for _, tc := range []ruleCase{{
		name: "expired tasks dropped on the way",
		run: func(h *harness) [][]string {
			h.offer(tkExp("a", 1, time.Second), tk("b", 2), tkExp("c", 3, 2*time.Second))
			h.advance(time.Second)
			return h.assign()
		},
		wantBatches: [][]string{{"b:2", "c:3"}},
		wantFates:   map[int]Fate{1: FateExpired},
		wantStats:   Stats{Accepted: 3, Expired: 1},
	}, {
		name: "all expired gives no batch",
		run: func(h *harness) [][]string {
			h.offer(tkExp("a", 1, time.Second))
			h.advance(time.Second)
			got := h.assign()
			h.offer(tk("b", 2))
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"b:2"}},
		wantFates:   map[int]Fate{1: FateExpired},
		wantStats:   Stats{Accepted: 2, Expired: 1},
	}, {
		name: "delay 0 sends any pending task at once",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			return h.assign()
		},
		wantBatches: [][]string{{"a:1"}},
		wantStats:   Stats{Accepted: 1},
	}, {
		name: "due when a full batch is ready before the delay",
		cfg:  func(c *Config[int]) { c.MaxBatch, c.MaxBatchingDelay = 2, delay },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			got := h.assign()
			h.offer(tk("b", 2), tk("c", 3))
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantPending: []string{"c:3"},
		wantStats:   Stats{Accepted: 3},
	}, {
		name: "due when the oldest has waited the delay",
		cfg:  func(c *Config[int]) { c.MaxBatchingDelay = delay },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(delay / 2)
			h.offer(tk("b", 2))
			h.advance(delay/2 - 1)
			got := h.assign()
			h.advance(1)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantStats:   Stats{Accepted: 2},
	}, {
		name: "batch capped at MaxBatch",
		cfg:  func(c *Config[int]) { c.MaxBatch, c.Workers = 2, 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("c", 3))
			return h.assign()
		},
		wantBatches: [][]string{{"a:1", "b:2"}, {"c:3"}},
		wantStats:   Stats{Accepted: 3},
	}, {
		name: "nothing handed out without an idle worker",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			got := h.assign()
			h.offer(tk("b", 2))
			got = append(got, h.assign()...)
			h.ok(0)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}, {"b:2"}},
		wantFates:   map[int]Fate{1: FateSucceeded},
		wantStats:   Stats{Accepted: 2, Succeeded: 1},
	}} {
		t.Run(tc.name, tc.test)
	}
}

func TestCoreIdleFlush(t *testing.T) {
	const delay, idle = 500 * time.Millisecond, 100 * time.Millisecond
	withIdle := func(c *Config[int]) { c.MaxBatchingDelay, c.IdleFlush = delay, idle }
	for _, tc := range []ruleCase{{
		name: "due once no task has been accepted for IdleFlush",
		cfg:  withIdle,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2))
			h.advance(idle - 1)
			got := h.assign()
			h.advance(1)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantStats:   Stats{Accepted: 2},
	}, {
		name: "measured from the last accept, not the oldest task",
		cfg:  withIdle,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(60 * time.Millisecond)
			h.offer(tk("b", 2))
			h.advance(idle - 1) // a has waited 159ms, but b came 99ms ago
			got := h.assign()
			h.advance(1)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantStats:   Stats{Accepted: 2},
	}, {
		name: "not due while tasks keep arriving within IdleFlush: the window holds",
		cfg:  withIdle,
		run: func(h *harness) [][]string {
			var got [][]string
			h.offer(tk("k0", 0))
			for i := 1; i <= 5; i++ { // one task every 90ms, up to 450ms
				h.advance(90 * time.Millisecond)
				got = append(got, h.assign()...)
				h.offer(tk(fmt.Sprintf("k%d", i), i))
			}
			h.advance(50*time.Millisecond - 1) // just before 500ms: neither rule yet
			got = append(got, h.assign()...)
			h.advance(1) // 500ms: the delay, 50ms after the last accept
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"k0:0", "k1:1", "k2:2", "k3:3", "k4:4", "k5:5"}},
		wantStats:   Stats{Accepted: 6},
	}, {
		name: "an override is an arrival",
		cfg:  withIdle,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(60 * time.Millisecond)
			h.offer(tk("a", 2))
			h.advance(60 * time.Millisecond)
			got := h.assign()
			h.advance(40 * time.Millisecond)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:2"}},
		wantFates:   map[int]Fate{1: FateOverridden},
		wantStats:   Stats{Accepted: 2, Overridden: 1},
	}, {
		name: "off when IdleFlush is 0: the whole delay",
		cfg:  func(c *Config[int]) { c.MaxBatchingDelay = delay },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(delay - 1)
			got := h.assign()
			h.advance(1)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}},
		wantStats:   Stats{Accepted: 1},
	}, {
		name: "no effect when MaxBatchingDelay is 0: sent at once",
		cfg:  func(c *Config[int]) { c.IdleFlush = time.Hour },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			return h.assign()
		},
		wantBatches: [][]string{{"a:1"}},
		wantStats:   Stats{Accepted: 1},
	}, {
		name: "a full batch is still due at once",
		cfg:  func(c *Config[int]) { withIdle(c); c.MaxBatch = 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("c", 3))
			got := h.assign()
			h.advance(idle)
			h.ok(0)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1", "b:2"}, {"c:3"}},
		wantFates:   map[int]Fate{1: FateSucceeded, 2: FateSucceeded},
		wantStats:   Stats{Accepted: 3, Succeeded: 2},
	}, {
		name: "a retry is no arrival: it goes out when the pause ends",
		cfg:  func(c *Config[int]) { withIdle(c); c.CongestionRetryDelay = 30 * time.Millisecond },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(idle)
			got := h.assign()
			h.complete(0, Result{Class: Congestion})
			h.advance(30*time.Millisecond - 1)
			got = append(got, h.assign()...)
			h.advance(1)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}, {"a:1"}},
		wantStats:   Stats{Accepted: 1, Replayed: 1, Congestion: 1},
	}} {
		t.Run(tc.name, tc.test)
	}
}

func TestCoreInFlightExclusion(t *testing.T) {
	for _, tc := range []ruleCase{{
		name: "a newer version waits in place until the batch completes",
		cfg:  func(c *Config[int]) { c.Workers = 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			got := h.assign()
			h.offer(tk("a", 2), tk("b", 3))
			got = append(got, h.assign()...)
			h.ok(0)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}, {"b:3"}, {"a:2"}},
		wantFates:   map[int]Fate{1: FateSucceeded},
		wantStats:   Stats{Accepted: 3, Succeeded: 1},
	}, {
		name: "one in process, at most one waiting",
		cfg:  func(c *Config[int]) { c.Workers = 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			got := h.assign()
			h.offer(tk("a", 2))
			h.offer(tk("a", 3))
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}},
		wantPending: []string{"a:3"},
		wantFates:   map[int]Fate{2: FateOverridden},
		wantStats:   Stats{Accepted: 3, Overridden: 1},
	}, {
		name: "a parked head does not hold back what follows",
		cfg:  func(c *Config[int]) { c.Workers, c.MaxBatchingDelay = 2, time.Second },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			h.advance(time.Second)
			got := h.assign()
			h.offer(tk("a", 2))
			h.advance(time.Second)
			h.offer(tk("b", 3))
			got = append(got, h.assign()...)
			h.advance(time.Second)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}, {"b:3"}},
		wantPending: []string{"a:2"},
		wantStats:   Stats{Accepted: 3},
	}, {
		name: "overflow may evict a parked task",
		cfg:  func(c *Config[int]) { c.MaxBuffer, c.MaxBatch = 2, 1 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			got := h.assign()
			h.offer(tk("a", 2), tk("b", 3), tk("c", 4))
			return got
		},
		wantBatches: [][]string{{"a:1"}},
		wantPending: []string{"b:3", "c:4"},
		wantFates:   map[int]Fate{2: FateOverflow},
		wantStats:   Stats{Accepted: 4, Overflow: 1},
	}, {
		name: "a failed batch yields to the waiting newer version",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			got := h.assign()
			h.offer(tk("a", 2))
			h.complete(0, Result{Class: NetworkFailure})
			h.advance(time.Second)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}, {"a:2"}},
		wantFates:   map[int]Fate{1: FateOverridden},
		wantStats:   Stats{Accepted: 2, Replayed: 1, Transient: 1, Overridden: 1},
	}} {
		t.Run(tc.name, tc.test)
	}
}

// TestCoreNewer covers Config.Newer: wherever two tasks of one ID meet,
// the later one wins unless the earlier supersedes it. Value is the version
// (byValue), except where a case needs a tie.
func TestCoreNewer(t *testing.T) {
	congestion := Result{Class: Congestion}
	newer := func(c *Config[int]) { c.Newer = byValue }
	// byTens makes 11 and 12 the same version, for the ties.
	byTens := func(c *Config[int]) { c.Newer = func(a, b *Task[int]) bool { return a.Value/10 > b.Value/10 } }
	for _, tc := range []ruleCase{{
		name: "[v10, v5] in one Offer sends v10",
		cfg:  newer,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 10), tk("a", 5))
			got := h.assign()
			h.ok(0)
			return got
		},
		wantBatches: [][]string{{"a:10"}},
		wantFates:   map[int]Fate{5: FateOverridden, 10: FateSucceeded},
		wantStats:   Stats{Accepted: 2, Overridden: 1, Succeeded: 1},
	}, {
		name: "[v5, v10] in one Offer sends v10",
		cfg:  newer,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 5), tk("a", 10))
			got := h.assign()
			h.ok(0)
			return got
		},
		wantBatches: [][]string{{"a:10"}},
		wantFates:   map[int]Fate{5: FateOverridden, 10: FateSucceeded},
		wantStats:   Stats{Accepted: 2, Overridden: 1, Succeeded: 1},
	}, {
		name: "without Newer [v10, v5] sends v5, the later arrival",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 10), tk("a", 5))
			return h.assign()
		},
		wantBatches: [][]string{{"a:5"}},
		wantFates:   map[int]Fate{10: FateOverridden},
		wantStats:   Stats{Accepted: 2, Overridden: 1},
	}, {
		name: "v1000 then v500 while waiting: v1000 keeps its place and age",
		cfg:  func(c *Config[int]) { newer(c); c.MaxBatchingDelay = 100 * time.Millisecond },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1000))
			h.advance(60 * time.Millisecond)
			h.offer(tk("b", 1))
			h.offer(tk("a", 500))
			h.advance(40*time.Millisecond - 1)
			got := h.assign() // not due yet: a's age is its first arrival's
			h.advance(1)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1000", "b:1"}},
		wantFates:   map[int]Fate{500: FateOverridden},
		wantStats:   Stats{Accepted: 3, Overridden: 1},
	}, {
		name: "v1000 in flight, then v500: dropped, nothing parks",
		cfg:  func(c *Config[int]) { newer(c); c.Workers = 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1000))
			got := h.assign()
			h.offer(tk("a", 500))
			got = append(got, h.assign()...)
			h.ok(0)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1000"}},
		wantFates:   map[int]Fate{500: FateOverridden, 1000: FateSucceeded},
		wantStats:   Stats{Accepted: 2, Overridden: 1, Succeeded: 1},
	}, {
		name: "v1000 in flight, then v2000: parks and follows",
		cfg:  func(c *Config[int]) { newer(c); c.Workers = 2 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1000))
			got := h.assign()
			h.offer(tk("a", 2000))
			got = append(got, h.assign()...)
			h.ok(0)
			got = append(got, h.assign()...)
			h.ok(0)
			return got
		},
		wantBatches: [][]string{{"a:1000"}, {"a:2000"}},
		wantFates:   map[int]Fate{1000: FateSucceeded, 2000: FateSucceeded},
		wantStats:   Stats{Accepted: 2, Succeeded: 2},
	}, {
		name: "v1000 in flight, parked v2000 evicted: v1500 is still held to v1000",
		cfg:  func(c *Config[int]) { newer(c); c.MaxBuffer, c.MaxBatch = 2, 1 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1000))
			got := h.assign()
			h.offer(tk("a", 2000), tk("b", 1), tk("c", 2)) // evicts a:2000
			h.offer(tk("a", 1500))                         // parks, evicts b:1
			h.offer(tk("a", 500))                          // loses to the parked a:1500
			h.ok(0)
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1000"}, {"c:2"}},
		wantPending: []string{"a:1500"},
		wantFates: map[int]Fate{1000: FateSucceeded, 2000: FateOverflow, 1: FateOverflow,
			500: FateOverridden},
		wantStats: Stats{Accepted: 6, Succeeded: 1, Overflow: 2, Overridden: 1},
	}, {
		name: "a tie while waiting goes to the later arrival",
		cfg:  byTens,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 11), tk("a", 12))
			return nil
		},
		wantPending: []string{"a:12"},
		wantFates:   map[int]Fate{11: FateOverridden},
		wantStats:   Stats{Accepted: 2, Overridden: 1},
	}, {
		name: "a tie with the flight parks",
		cfg:  byTens,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 11))
			got := h.assign()
			h.offer(tk("a", 12))
			return got
		},
		wantBatches: [][]string{{"a:11"}},
		wantPending: []string{"a:12"},
		wantStats:   Stats{Accepted: 2},
	}, {
		name: "a retry older than the pending task yields",
		cfg:  newer,
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2))
			got := h.assign()
			h.offer(tk("a", 3)) // parks
			h.complete(0, congestion)
			return got
		},
		wantBatches: [][]string{{"a:1", "b:2"}},
		wantPending: []string{"b:2", "a:3"},
		wantFates:   map[int]Fate{1: FateOverridden},
		wantStats:   Stats{Accepted: 3, Replayed: 2, Congestion: 2, Overridden: 1},
	}, {
		name: "a retry newer than the pending task survives, in front with its age",
		cfg: func(c *Config[int]) {
			newer(c)
			c.MaxBatchingDelay, c.CongestionRetryDelay = 100*time.Millisecond, 0
		},
		run: func(h *harness) [][]string {
			h.offer(tk("a", 10), tk("b", 1))
			h.advance(100 * time.Millisecond)
			got := h.assign()
			h.completeThenOffer(0, congestion, tk("a", 5), tk("c", 2))
			return append(got, h.assign()...) // due: a:10 has waited 100ms
		},
		wantBatches: [][]string{{"a:10", "b:1"}, {"a:10", "b:1", "c:2"}},
		wantFates:   map[int]Fate{5: FateOverridden},
		wantStats:   Stats{Accepted: 4, Replayed: 2, Congestion: 2, Overridden: 1},
	}, {
		name: "without Newer the pending task beats the retry, as before",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 10), tk("b", 1))
			got := h.assign()
			h.completeThenOffer(0, congestion, tk("a", 5), tk("c", 2))
			return got
		},
		wantBatches: [][]string{{"a:10", "b:1"}},
		wantPending: []string{"b:1", "a:5", "c:2"},
		wantFates:   map[int]Fate{10: FateOverridden},
		wantStats:   Stats{Accepted: 4, Replayed: 2, Congestion: 2, Overridden: 1},
	}, {
		name: "an expired retry is expired, not compared",
		cfg:  newer,
		run: func(h *harness) [][]string {
			h.offer(tkExp("a", 10, time.Second))
			got := h.assign()
			h.advance(time.Second)
			h.completeThenOffer(0, congestion, tk("a", 5))
			return got
		},
		wantBatches: [][]string{{"a:10"}},
		wantPending: []string{"a:5"},
		wantFates:   map[int]Fate{10: FateExpired},
		wantStats:   Stats{Accepted: 2, Replayed: 1, Congestion: 1, Expired: 1},
	}} {
		t.Run(tc.name, tc.test)
	}
}

func TestCoreOutcomes(t *testing.T) {
	items := func(o ...ItemOutcome) []ItemOutcome { return o }
	for _, tc := range []struct {
		name        string
		result      Result
		wantPending []string
		wantFates   map[int]Fate
		wantStats   Stats
	}{{
		name:      "ItemOK succeeds",
		result:    Result{Items: items(ItemOK, ItemOK)},
		wantFates: map[int]Fate{1: FateSucceeded, 2: FateSucceeded},
		wantStats: Stats{Succeeded: 2},
	}, {
		name:      "ItemStale is done",
		result:    Result{Items: items(ItemStale, ItemOK)},
		wantFates: map[int]Fate{1: FateStale, 2: FateSucceeded},
		wantStats: Stats{Stale: 1, Succeeded: 1},
	}, {
		name:        "ItemBusy is reprocessed",
		result:      Result{Items: items(ItemOK, ItemBusy)},
		wantPending: []string{"b:2"},
		wantFates:   map[int]Fate{1: FateSucceeded},
		wantStats:   Stats{Succeeded: 1, Congestion: 1, Replayed: 1},
	}, {
		name:      "ItemInvalid is dropped as permanent",
		result:    Result{Items: items(ItemInvalid, ItemOK), Err: errors.New("bad")},
		wantFates: map[int]Fate{1: FatePermanent, 2: FateSucceeded},
		wantStats: Stats{Permanent: 1, Succeeded: 1},
	}, {
		name:      "an unknown item outcome is permanent",
		result:    Result{Items: items(ItemOutcome(42), ItemOK)},
		wantFates: map[int]Fate{1: FatePermanent, 2: FateSucceeded},
		wantStats: Stats{Permanent: 1, Succeeded: 1},
	}, {
		name:      "Success with the wrong number of items is permanent",
		result:    Result{Items: items(ItemOK)},
		wantFates: map[int]Fate{1: FatePermanent, 2: FatePermanent},
		wantStats: Stats{Permanent: 2},
	}, {
		name:        "Congestion reprocesses all",
		result:      Result{Class: Congestion},
		wantPending: []string{"a:1", "b:2"},
		wantStats:   Stats{Congestion: 2, Replayed: 2},
	}, {
		name:        "NetworkFailure reprocesses all",
		result:      Result{Class: NetworkFailure},
		wantPending: []string{"a:1", "b:2"},
		wantStats:   Stats{Transient: 2, Replayed: 2},
	}, {
		name:      "Permanent drops all",
		result:    Result{Class: Permanent, Err: errors.New("denied")},
		wantFates: map[int]Fate{1: FatePermanent, 2: FatePermanent},
		wantStats: Stats{Permanent: 2},
	}, {
		name:      "an unknown class is permanent",
		result:    Result{Class: Class(42)},
		wantFates: map[int]Fate{1: FatePermanent, 2: FatePermanent},
		wantStats: Stats{Permanent: 2},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ruleCase{
				run: func(h *harness) [][]string {
					h.offer(tk("a", 1), tk("b", 2))
					got := h.assign()
					h.complete(0, tc.result)
					return got
				},
				wantBatches: [][]string{{"a:1", "b:2"}},
				wantPending: tc.wantPending,
				wantFates:   tc.wantFates,
				wantStats:   Stats{Accepted: 2}.add(tc.wantStats),
			}.test(t)
		})
	}
}

// add sums the counters of s and o.
func (s Stats) add(o Stats) Stats {
	s.Accepted += o.Accepted
	s.Overridden += o.Overridden
	s.Overflow += o.Overflow
	s.Expired += o.Expired
	s.Replayed += o.Replayed
	s.Succeeded += o.Succeeded
	s.Congestion += o.Congestion
	s.Transient += o.Transient
	s.Permanent += o.Permanent
	s.Stale += o.Stale
	s.TooLarge += o.TooLarge
	return s
}

// fakeGate holds dispatch until until.
type fakeGate struct{ until time.Time }

func (g *fakeGate) Hold(now time.Time) time.Duration { return max(g.until.Sub(now), 0) }

func TestCoreShaperPauses(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name string
		// fail completes the first batch at t0, maybe advances, fails another.
		fail     func(h *harness)
		gate     time.Duration // the gate holds until t0+gate
		wantHold time.Duration // no batch before t0+wantHold, one at it
	}{
		{"congestion pauses CongestionRetryDelay", func(h *harness) { h.complete(0, Result{Class: Congestion}) }, 0, 100 * ms},
		{"network failure pauses NetworkFailureRetryDelay", func(h *harness) { h.complete(0, Result{Class: NetworkFailure}) }, 0, time.Second},
		{"ItemBusy pauses like congestion", func(h *harness) { h.complete(0, Result{Items: []ItemOutcome{ItemBusy}}) }, 0, 100 * ms},
		{"ItemStale does not pause", func(h *harness) { h.complete(0, Result{Items: []ItemOutcome{ItemStale}}) }, 0, 0},
		{"Permanent does not pause", func(h *harness) { h.complete(0, Result{Class: Permanent}) }, 0, 0},
		{"the longer of both pauses wins", func(h *harness) {
			h.complete(0, Result{Class: NetworkFailure})
			h.advance(50 * ms)
			h.complete(0, Result{Class: Congestion})
			h.now = t0
		}, 0, time.Second},
		{"a later congestion extends past the network pause", func(h *harness) {
			h.complete(0, Result{Class: NetworkFailure})
			h.advance(950 * ms)
			h.complete(0, Result{Class: Congestion})
			h.now = t0
		}, 0, 1050 * ms},
		{"the gate holds longer than the shaper", func(h *harness) { h.complete(0, Result{Class: Congestion}) }, 300 * ms, 300 * ms},
		{"the shaper holds longer than the gate", func(h *harness) { h.complete(0, Result{Class: Congestion}) }, 30 * ms, 100 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gate := &fakeGate{}
			h := newHarness(t, func(c *Config[int]) { c.Workers, c.MaxBatch, c.Gate = 2, 1, gate })
			h.offer(tk("x", 1), tk("y", 2))
			h.assign()
			gate.until = t0.Add(tc.gate)
			tc.fail(h)
			h.offer(tk("z", 3))
			if tc.wantHold > 0 {
				h.now = t0.Add(tc.wantHold - 1)
				if d, ok := h.c.nextWake(h.now); !ok || d != 1 {
					t.Errorf("nextWake 1ns before the end = %v, %v; want 1ns, true", d, ok)
				}
				if got := h.assign(); len(got) != 0 {
					t.Fatalf("assigned %q during the pause", got)
				}
			}
			h.now = t0.Add(tc.wantHold)
			if got := h.assign(); len(got) == 0 {
				t.Fatalf("nothing assigned at the end of the pause")
			}
		})
	}
}

func TestCoreNextWake(t *testing.T) {
	const delay = 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		cfg    func(*Config[int])
		run    func(h *harness)
		wantD  time.Duration
		wantOK bool
	}{
		{"empty", nil, func(h *harness) {}, 0, false},
		{"no idle worker", nil, func(h *harness) {
			h.offer(tk("a", 1))
			h.assign()
			h.offer(tk("b", 2))
		}, 0, false},
		{"only parked tasks", func(c *Config[int]) { c.Workers = 2 }, func(h *harness) {
			h.offer(tk("a", 1))
			h.assign()
			h.offer(tk("a", 2))
		}, 0, false},
		{"the head becomes due", func(c *Config[int]) { c.MaxBatchingDelay = delay }, func(h *harness) {
			h.offer(tk("a", 1))
			h.advance(30 * time.Millisecond)
		}, 70 * time.Millisecond, true},
		{"the idle flush comes first", func(c *Config[int]) {
			c.MaxBatchingDelay, c.IdleFlush = delay, 20*time.Millisecond
		}, func(h *harness) {
			h.offer(tk("a", 1))
			h.advance(30 * time.Millisecond)
			h.offer(tk("b", 2))
			h.advance(5 * time.Millisecond)
		}, 15 * time.Millisecond, true},
		{"the head's delay comes first", func(c *Config[int]) {
			c.MaxBatchingDelay, c.IdleFlush = delay, 50*time.Millisecond
		}, func(h *harness) {
			h.offer(tk("a", 1))
			h.advance(60 * time.Millisecond)
			h.offer(tk("b", 2))
			h.advance(10 * time.Millisecond)
		}, 30 * time.Millisecond, true},
		{"a pause outlasts the idle flush", func(c *Config[int]) {
			c.MaxBatchingDelay, c.IdleFlush, c.Workers = delay, 50*time.Millisecond, 2
		}, func(h *harness) {
			h.offer(tk("a", 1))
			h.advance(50 * time.Millisecond)
			h.assign()
			h.offer(tk("b", 2))
			h.complete(0, Result{Class: Congestion}) // pause until 150ms; idle flush at 100ms
			h.advance(20 * time.Millisecond)
		}, 80 * time.Millisecond, true},
		{"the pause ends", nil, func(h *harness) {
			h.offer(tk("a", 1))
			h.assign()
			h.complete(0, Result{Class: Congestion})
			h.advance(40 * time.Millisecond)
		}, 60 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg)
			tc.run(h)
			h.assign()
			d, ok := h.c.nextWake(h.now)
			if d != tc.wantD || ok != tc.wantOK {
				t.Errorf("nextWake = %v, %v; want %v, %v", d, ok, tc.wantD, tc.wantOK)
			}
		})
	}
}

func TestTransmissionDelay(t *testing.T) {
	const (
		cong = 100 * time.Millisecond
		net  = time.Second
	)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var never time.Time
	for _, tc := range []struct {
		name              string
		now               time.Time
		lastCong, lastNet time.Time
		want              time.Duration
	}{
		{"no failure", at(0), never, never, 0},
		{"just congested", at(0), at(0), never, cong},
		{"congestion half over", at(60 * time.Millisecond), at(10 * time.Millisecond), never, 50 * time.Millisecond},
		{"congestion over", at(cong), at(0), never, 0},
		{"long after congestion", at(time.Hour), at(0), never, 0},
		{"just failed", at(0), never, at(0), net},
		{"network pause nearly over", at(999 * time.Millisecond), never, at(0), time.Millisecond},
		{"network pause over", at(net), never, at(0), 0},
		{"both: network longer", at(10 * time.Millisecond), at(10 * time.Millisecond), at(0), 990 * time.Millisecond},
		{"both: congestion longer", at(950 * time.Millisecond), at(900 * time.Millisecond), at(0), 50 * time.Millisecond},
		{"clock stepped back stays bounded", at(0), at(time.Hour), at(time.Hour), net},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := transmissionDelay(tc.now, tc.lastCong, cong, tc.lastNet, net); got != tc.want {
				t.Errorf("transmissionDelay = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestCoreStats walks one scenario and checks every counter and gauge after each
// step.
func TestCoreStats(t *testing.T) {
	h := newHarness(t, func(c *Config[int]) {
		c.MaxBuffer, c.MaxBatch, c.Workers, c.CongestionRetryDelay = 3, 2, 2, 0
	})
	steps := []struct {
		name string
		do   func()
		want Stats
	}{
		{"start", func() {}, Stats{IdleWorkers: 2}},
		{"offer with an override and an overflow",
			func() { h.offer(tk("a", 1), tk("b", 2), tk("a", 3), tk("c", 4), tk("d", 5)) },
			Stats{Accepted: 5, Overridden: 1, Overflow: 1, Pending: 3, IdleWorkers: 2}},
		{"assign two batches", func() { h.assign() },
			Stats{Accepted: 5, Overridden: 1, Overflow: 1, InFlight: 3}},
		{"first batch: ok and stale", func() { h.complete(0, Result{Items: []ItemOutcome{ItemOK, ItemStale}}) },
			Stats{Accepted: 5, Overridden: 1, Overflow: 1, Succeeded: 1, Stale: 1, InFlight: 1, IdleWorkers: 1}},
		{"second batch congested, retry queued", func() {
			b := h.out[0]
			h.out = h.out[1:]
			b.result = Result{Class: Congestion}
			h.c.complete(b, h.now)
		}, Stats{Accepted: 5, Overridden: 1, Overflow: 1, Succeeded: 1, Stale: 1, Congestion: 1, Replayed: 1,
			ReprocessQueue: 1, IdleWorkers: 2}},
		{"retry drained", func() { h.c.drainReprocess(h.now) },
			Stats{Accepted: 5, Overridden: 1, Overflow: 1, Succeeded: 1, Stale: 1, Congestion: 1, Replayed: 1,
				Pending: 1, IdleWorkers: 2}},
		{"network failure then invalid", func() {
			h.assign()
			h.complete(0, Result{Class: NetworkFailure})
			h.advance(time.Second)
			h.offer(tkExp("e", 6, 0))
			h.assign()
			h.complete(0, Result{Items: []ItemOutcome{ItemInvalid}})
		}, Stats{Accepted: 6, Overridden: 1, Overflow: 1, Succeeded: 1, Stale: 1, Congestion: 1, Replayed: 2,
			Transient: 1, Expired: 1, Permanent: 1, IdleWorkers: 2}},
	}
	for _, s := range steps {
		s.do()
		if got := h.c.stats(); got != s.want {
			t.Fatalf("after %q:\n got %+v\nwant %+v", s.name, got, s.want)
		}
	}
}

func TestCoreStop(t *testing.T) {
	h := newHarness(t, func(c *Config[int]) { c.MaxBatch, c.Workers = 1, 3 })
	h.offer(tk("a", 1), tk("b", 2), tk("c", 3), tk("d", 4))
	h.assign() // a, b, c in flight
	h.out[0].result = Result{Class: Congestion}
	h.c.complete(h.out[0], h.now) // a waits in the reprocess queue
	h.out[1].result = Result{Items: []ItemOutcome{ItemOK}}
	h.c.complete(h.out[1], h.now) // b succeeded
	h.c.abort(h.out[2])           // c never sent
	h.c.stopTasks([]Task[int]{tk("e", 5)})
	h.c.stopAll()
	h.check()
	want := fateLog{1: {FateStopped}, 2: {FateSucceeded}, 3: {FateStopped}, 4: {FateStopped}, 5: {FateStopped}}
	for val, f := range want {
		if !slices.Equal(h.fates[val], f) {
			t.Errorf("fates of %d = %v, want %v", val, h.fates[val], f)
		}
	}
	if s := h.c.stats(); s.Accepted != 5 || s.Pending != 0 || s.InFlight != 0 || s.ReprocessQueue != 0 || s.IdleWorkers != 3 {
		t.Errorf("stats after stop = %+v", s)
	}
	if !h.c.empty() {
		t.Error("core not empty after stop")
	}
}

func TestCoreOnFinalNil(t *testing.T) {
	cfg := testConfig(nil)
	c := newCore(&cfg) // OnFinal nil
	c.accept([]Task[int]{tk("a", 1), tk("a", 2)}, t0)
	b, _ := c.assign(t0)
	b.result = Result{Class: Permanent}
	c.complete(b, t0)
	if s := c.stats(); s.Overridden != 1 || s.Permanent != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// TestOnPark: OnPark is called once when a task parks behind the task of its ID in
// flight, and not for a task that replaces one parked already, one that loses to the
// flight, or one whose ID is not in flight.
func TestOnPark(t *testing.T) {
	parks := 0
	h := newHarness(t, func(c *Config[int]) {
		c.Newer = byValue
		c.Workers = 2
		c.OnPark = func() { parks++ }
	})
	h.offer(tk("a", 1000))
	h.assign()
	h.offer(tk("b", 1))   // not in flight
	h.offer(tk("a", 500)) // loses to the flight
	if parks != 0 {
		t.Fatalf("%d parks before any task parked", parks)
	}
	h.offer(tk("a", 2000)) // parks behind a:1000
	h.offer(tk("a", 3000)) // replaces the parked a:2000
	if parks != 1 {
		t.Fatalf("OnPark called %d times, want 1 (the first park)", parks)
	}
}
