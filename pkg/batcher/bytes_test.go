package batcher

import (
	"errors"
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
