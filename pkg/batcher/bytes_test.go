package batcher

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// byValueSize is a Config.Size for the byte rules' tests: a task's value is its size.
func byValueSize(v int) int { return v }

// withBytes sets the byte bounds and Size = the value.
func withBytes(buffer, batch int) func(*Config[int]) {
	return func(c *Config[int]) {
		c.MaxBufferBytes, c.MaxBatchBytes, c.Size = buffer, batch, byValueSize
	}
}

func TestCoreBufferBytes(t *testing.T) {
	for _, tc := range []ruleCase{{
		name: "an arrival evicts the oldest until it fits",
		cfg:  withBytes(10, 10),
		run: func(h *harness) [][]string {
			h.offer(tk("a", 3), tk("b", 4), tk("c", 2))
			h.offer(tk("d", 5)) // 9+5 > 10: a (3) goes, 6+5 > 10: b (4) goes
			return nil
		},
		wantPending: []string{"c:2", "d:5"},
		wantFates:   map[int]Fate{3: FateOverflow, 4: FateOverflow},
		wantStats:   Stats{Accepted: 4, Overflow: 2},
	}, {
		name: "a task bigger than the buffer never enters, and evicts nothing",
		cfg:  withBytes(10, 10),
		run: func(h *harness) [][]string {
			h.offer(tk("a", 3), tk("b", 11))
			return nil
		},
		wantPending: []string{"a:3"},
		wantFates:   map[int]Fate{11: FateOverflow},
		wantStats:   Stats{Accepted: 2, Overflow: 1},
	}, {
		name: "a bigger version of a waiting task evicts the oldest others, not itself",
		cfg: func(c *Config[int]) {
			withBytes(10, 10)(c)
			c.Newer = byValue
		},
		run: func(h *harness) [][]string {
			h.offer(tk("a", 2), tk("b", 3), tk("c", 4))
			h.offer(tk("a", 6)) // a keeps its place: 6+3+4 > 10, b goes; 6+4 fits
			return nil
		},
		wantPending: []string{"a:6", "c:4"},
		wantFates:   map[int]Fate{2: FateOverridden, 3: FateOverflow},
		wantStats:   Stats{Accepted: 4, Overridden: 1, Overflow: 1},
	}, {
		name: "retries that do not fit in bytes are dropped, the earliest first",
		cfg:  withBytes(10, 10),
		run: func(h *harness) [][]string {
			h.offer(tk("a", 4), tk("b", 5))
			got := h.assign()
			h.offer(tk("c", 3), tk("d", 2)) // pending 5 while a and b fly
			h.complete(0, Result{Class: Congestion})
			return got // b (5) fits in front of 5, a (4) would make 14
		},
		wantBatches: [][]string{{"a:4", "b:5"}},
		wantPending: []string{"b:5", "c:3", "d:2"},
		wantFates:   map[int]Fate{4: FateOverflow},
		wantStats:   Stats{Accepted: 4, Congestion: 2, Replayed: 2, Overflow: 1},
	}} {
		t.Run(tc.name, tc.test)
	}
}

func TestCoreBatchBytes(t *testing.T) {
	for _, tc := range []ruleCase{{
		name: "a batch stops at the first task that does not fit",
		cfg:  withBytes(100, 10),
		run: func(h *harness) [][]string {
			h.offer(tk("a", 4), tk("b", 5), tk("c", 2), tk("d", 1))
			return h.assign() // one worker: 4+5, then c would make 11
		},
		wantBatches: [][]string{{"a:4", "b:5"}},
		wantPending: []string{"c:2", "d:1"},
		wantStats:   Stats{Accepted: 4},
	}, {
		name: "a task bigger than a batch travels alone",
		cfg: func(c *Config[int]) {
			withBytes(100, 10)(c)
			c.Workers = 3
		},
		run: func(h *harness) [][]string {
			h.offer(tk("a", 12), tk("b", 1), tk("c", 30), tk("d", 2))
			return h.assign()
		},
		wantBatches: [][]string{{"a:12"}, {"b:1"}, {"c:30"}},
		wantPending: []string{"d:2"},
		wantStats:   Stats{Accepted: 4},
	}, {
		name: "expired tasks on the way are dropped, not measured",
		cfg:  withBytes(100, 10),
		run: func(h *harness) [][]string {
			h.offer(tk("a", 6), tkExp("b", 9, time.Millisecond), tk("c", 4))
			h.advance(time.Millisecond)
			return h.assign()
		},
		wantBatches: [][]string{{"a:6", "c:4"}},
		wantFates:   map[int]Fate{9: FateExpired},
		wantStats:   Stats{Accepted: 3, Expired: 1},
	}, {
		name: "a batch full in bytes is due before the window",
		cfg: func(c *Config[int]) {
			withBytes(100, 10)(c)
			c.MaxBatchingDelay = time.Second
		},
		run: func(h *harness) [][]string {
			h.offer(tk("a", 4), tk("b", 5))
			none := h.assign() // 9 < 10: not due
			h.offer(tk("c", 1))
			return append(none, h.assign()...)
		},
		wantBatches: [][]string{{"a:4", "b:5", "c:1"}},
		wantStats:   Stats{Accepted: 3},
	}} {
		t.Run(tc.name, tc.test)
	}
}

func TestCoreTooLarge(t *testing.T) {
	tooLarge := Result{Class: TooLarge, Err: errors.New("message larger than max")}
	for _, tc := range []ruleCase{{
		name: "a task refused alone is dropped, without a pause",
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1))
			got := h.assign()
			h.complete(0, tooLarge)
			h.offer(tk("b", 2))
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1"}, {"b:2"}},
		wantFates:   map[int]Fate{1: FateTooLarge},
		wantStats:   Stats{Accepted: 2, TooLarge: 1},
	}, {
		name: "a batch is split until the peer takes it, and a task it refuses alone is dropped",
		cfg:  func(c *Config[int]) { c.MaxBatch = 8 },
		run: func(h *harness) [][]string {
			h.offer(tk("a", 1), tk("b", 2), tk("c", 3), tk("d", 4), tk("e", 5))
			got := h.assign()                // a..e
			h.complete(0, tooLarge)          // limit 2
			got = append(got, h.assign()...) // a, b
			h.complete(0, tooLarge)          // limit 1
			for range 4 {
				got = append(got, h.assign()...)
				if len(h.out[0].tasks) == 1 && h.out[0].tasks[0].ID == "c" {
					h.complete(0, tooLarge)
				} else {
					h.ok(0)
				}
			}
			return append(got, h.assign()...)
		},
		wantBatches: [][]string{{"a:1", "b:2", "c:3", "d:4", "e:5"}, {"a:1", "b:2"}, {"a:1"}, {"b:2"}, {"c:3"}, {"d:4"}, {"e:5"}},
		wantPending: nil,
		wantFates:   map[int]Fate{1: FateSucceeded, 2: FateSucceeded, 3: FateTooLarge, 4: FateSucceeded},
		wantStats:   Stats{Accepted: 5, Replayed: 7, TooLarge: 1, Succeeded: 3},
	}} {
		t.Run(tc.name, tc.test)
	}
}

// TestCoreSplitRecovers: the batch limit a split lowered doubles back, one doubling
// per success at least splitRecovery after the last change, up to MaxBatch.
func TestCoreSplitRecovers(t *testing.T) {
	h := newHarness(t, func(c *Config[int]) { c.MaxBatch, c.MaxBuffer = 8, 100 })
	offer := func(n int) {
		for i := range n {
			h.offer(tk(string(rune('a'+i)), i))
		}
	}
	offer(8)
	h.assign()
	h.complete(0, Result{Class: TooLarge}) // 8 → limit 4
	if h.c.batchLimit != 4 {
		t.Fatalf("limit after a split of 8: %d, want 4", h.c.batchLimit)
	}
	for _, step := range []struct {
		advance time.Duration
		want    int
	}{{0, 4}, {testSplitRecovery - 1, 4}, {1, 8}, {testSplitRecovery, 8}} {
		h.advance(step.advance)
		h.assign()
		for len(h.out) > 0 {
			h.ok(0)
			h.assign()
		}
		offer(8)
		if h.c.batchLimit != step.want {
			t.Fatalf("after %v more: limit %d, want %d", step.advance, h.c.batchLimit, step.want)
		}
	}
}

// TestCoreSplitByBytes: with Size, a split halves the bytes a batch may take, not
// its tasks: a huge task among small ones ends alone (and dropped), and the small
// ones still go out several at a time.
func TestCoreSplitByBytes(t *testing.T) {
	tooLarge := Result{Class: TooLarge}
	h := newHarness(t, withBytes(1000, 100))
	h.offer(tk("huge", 60), tk("a", 5), tk("b", 5), tk("c", 5), tk("d", 5), tk("e", 5), tk("f", 5), tk("g", 5), tk("h", 5))
	var got [][]string
	// The peer takes at most 20 bytes: it refuses anything bigger.
	for step := 0; len(h.out) > 0 || h.c.order.n > 0; step++ {
		if step > 20 {
			t.Fatalf("still sending after %d calls: %q", step, got)
		}
		got = append(got, h.assign()...)
		b := h.out[0]
		if sum(b.sizes) > 20 {
			h.complete(0, tooLarge)
		} else {
			h.ok(0)
		}
	}
	want := [][]string{
		{"huge:60", "a:5", "b:5", "c:5", "d:5", "e:5", "f:5", "g:5", "h:5"}, // 100 bytes: limit → 50
		{"huge:60"}, // alone: dropped
		{"a:5", "b:5", "c:5", "d:5", "e:5", "f:5", "g:5", "h:5"}, // 40 > 20: limit → 20
		{"a:5", "b:5", "c:5", "d:5"},
		{"e:5", "f:5", "g:5", "h:5"},
	}
	if !equalBatches(got, want) {
		t.Fatalf("batches\n%q\nwant\n%q", got, want)
	}
	if s := h.c.stats(); s.TooLarge != 1 || s.Succeeded != 8 {
		t.Fatalf("stats %+v", s)
	}
}

// TestCoreTooLargeEnds: a peer that refuses every request as too large, whatever the
// sizes and limits, gets a bounded number of calls: every task ends refused alone,
// none is retried forever.
func TestCoreTooLargeEnds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for run := range 200 {
		withSize := run%2 == 0
		h := newHarness(t, func(c *Config[int]) {
			c.MaxBuffer, c.MaxBatch, c.Workers = 64, 1+rng.IntN(64), 1+rng.IntN(4)
			if withSize {
				c.MaxBufferBytes, c.MaxBatchBytes, c.Size = 1<<20, 1+rng.IntN(1000), func(v int) int { return v % 97 }
			}
		})
		n := 1 + rng.IntN(64)
		for i := range n {
			h.offer(tk(fmt.Sprint(i), rng.IntN(1000)))
		}
		calls := 0
		for h.assign(); len(h.out) > 0; h.assign() {
			if calls++; calls > 64*n {
				t.Fatalf("run %d: %d calls for %d tasks, and still going", run, calls, n)
			}
			h.complete(rng.IntN(len(h.out)), Result{Class: TooLarge})
		}
		if s := h.c.stats(); s.TooLarge != uint64(n) || s.Pending != 0 {
			t.Fatalf("run %d: %+v, want all %d tasks too large", run, s, n)
		}
	}
}
