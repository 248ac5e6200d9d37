package jetstream

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fanout/fanout/pkg/state"
)

func TestDecide(t *testing.T) {
	ev := state.Stamp{Version: 10, Origin: "b"}
	for _, tc := range []struct {
		name string
		cur  current
		want decision
	}{
		{"absent", current{}, decision{verdict: publish}},
		{"older version", current{present: true, stamp: state.Stamp{Version: 9, Origin: "z"}, seq: 5}, decision{verdict: publish, seq: 5}},
		{"same version, lower origin", current{present: true, stamp: state.Stamp{Version: 10, Origin: "a"}, seq: 6}, decision{verdict: publish, seq: 6}},
		{"foreign message", current{present: true, seq: 7}, decision{verdict: publish, seq: 7}},
		{"the event itself", current{present: true, stamp: ev, seq: 8}, decision{verdict: stored}},
		{"same version, higher origin", current{present: true, stamp: state.Stamp{Version: 10, Origin: "c"}, seq: 9}, decision{verdict: stale}},
		{"newer version", current{present: true, stamp: state.Stamp{Version: 11, Origin: "a"}, seq: 9}, decision{verdict: stale}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newCAS(ev, 3).decide(tc.cur); got != tc.want {
				t.Fatalf("decide(%+v) = %+v, want %+v", tc.cur, got, tc.want)
			}
		})
	}
	t.Run("attempts are bounded", func(t *testing.T) {
		c := newCAS(ev, 2)
		cur := current{present: true, stamp: state.Stamp{Version: 1, Origin: "a"}, seq: 1}
		for i := range 2 {
			if d := c.decide(cur); d.verdict != publish {
				t.Fatalf("attempt %d: %v", i+1, d.verdict)
			}
			c.conflict()
			cur.seq++
		}
		if d := c.decide(cur); d.verdict != gaveUp || c.conflicts != 2 {
			t.Fatalf("after 2 conflicts: %v, %d conflicts", d.verdict, c.conflicts)
		}
		// What is decided without a publish does not count against the bound.
		if d := c.decide(current{present: true, stamp: state.Stamp{Version: 99}, seq: 9}); d.verdict != stale {
			t.Fatalf("a newer message after the attempts: %v", d.verdict)
		}
	})
}

// modelStream is one key of a stream with history 1: its last message and the
// stream's sequence; a publish lands only if it expects the key's last sequence.
type modelStream struct {
	cur     current
	lastSeq uint64
	history []state.Stamp // every stamp that landed, in order
}

func (s *modelStream) publish(st state.Stamp, expect uint64) bool {
	if expect != s.cur.seq {
		return false
	}
	s.lastSeq++
	s.cur = current{present: true, stamp: st, seq: s.lastSeq}
	s.history = append(s.history, st)
	return true
}

// writer is one node publishing one event through its cas: it reads the key (maybe
// long before it publishes), decides, publishes.
type writer struct {
	c        *cas
	read     current // what it last read
	hasRead  bool
	pending  *decision
	verdict  verdict
	finished bool
}

// TestCASModel: writers of one key interleave their reads and publishes in a random
// (seeded) order against the model stream. The stream's stamp never goes back; a
// writer that ends stale saw a newer stamp, one that ends stored (or landed) is in
// the history; and with attempts enough for every writer, the stream ends holding
// the highest stamp of them all.
func TestCASModel(t *testing.T) {
	for _, tc := range []struct{ writers, maxAttempts int }{{2, 3}, {8, 9}, {8, 1}, {8, 2}, {16, 4}} {
		t.Run(fmt.Sprintf("writers=%d,attempts=%d", tc.writers, tc.maxAttempts), func(t *testing.T) {
			for seed := range uint64(300) {
				runCASModel(t, seed, tc.writers, tc.maxAttempts)
			}
		})
	}
}

func runCASModel(t *testing.T, seed uint64, n, maxAttempts int) {
	rng := rand.New(rand.NewPCG(seed, 27))
	s := &modelStream{}
	if rng.IntN(2) == 0 { // a key that already holds something old
		s.publish(state.Stamp{Version: 1, Origin: "old"}, 0)
	}
	ws := make([]*writer, n)
	var highest state.Stamp
	for i := range ws {
		st := state.Stamp{Version: uint64(2 + rng.IntN(4)), Origin: fmt.Sprintf("n%d", rng.IntN(4))}
		ws[i] = &writer{c: newCAS(st, maxAttempts)}
		if st.Newer(highest) {
			highest = st
		}
	}
	for live := n; live > 0; {
		w := ws[rng.IntN(n)]
		if w.finished {
			continue
		}
		before := s.cur.stamp
		switch {
		case w.pending != nil: // publish what it decided
			if s.publish(w.c.ev, w.pending.seq) {
				w.verdict, w.finished = publish, true
			} else {
				w.c.conflict()
				w.hasRead = false
			}
			w.pending = nil
		case !w.hasRead && w.c.attempts > 0 || rng.IntN(3) == 0: // (re)read: a direct get
			w.read, w.hasRead = s.cur, true
		default: // decide on what it read (the first attempt may assume absent)
			d := w.c.decide(w.read)
			if d.verdict == publish {
				w.pending = &d
			} else {
				w.verdict, w.finished = d.verdict, true
			}
		}
		if w.finished {
			live--
		}
		if before.Newer(s.cur.stamp) {
			t.Fatalf("seed %d: the stream went back from %+v to %+v", seed, before, s.cur.stamp)
		}
	}
	landed := map[state.Stamp]bool{}
	for _, st := range s.history {
		landed[st] = true
	}
	gaveUps := 0
	for i, w := range ws {
		switch w.verdict {
		case publish, stored:
			if !landed[w.c.ev] {
				t.Fatalf("seed %d: writer %d ended %v but %+v never landed", seed, i, w.verdict, w.c.ev)
			}
		case stale:
			if !s.cur.stamp.Newer(w.c.ev) {
				t.Fatalf("seed %d: writer %d ended stale with %+v; the stream holds %+v", seed, i, w.c.ev, s.cur.stamp)
			}
		case gaveUp:
			gaveUps++
			if w.c.conflicts != maxAttempts {
				t.Fatalf("seed %d: writer %d gave up after %d conflicts, want %d", seed, i, w.c.conflicts, maxAttempts)
			}
		}
	}
	if maxAttempts > n && (gaveUps > 0 || s.cur.stamp != highest) {
		t.Fatalf("seed %d: %d gave up; the stream holds %+v, want the highest %+v", seed, gaveUps, s.cur.stamp, highest)
	}
}
