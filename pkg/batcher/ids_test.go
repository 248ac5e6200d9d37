package batcher

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

// all calls f for every holder, in slot order.
func (x *idIndex[T]) all(f func(*holder[T])) {
	for _, s := range x.slots {
		if s.h != nil {
			f(s.h)
		}
	}
}

// check verifies idIndex's invariants: the load bound, the count, each slot's hash
// is its holder's and its ID's, and each holder is reachable from its home without
// crossing an empty slot.
func (x *idIndex[T]) check() error {
	if uint64(len(x.slots)) != x.mask+1 || len(x.slots)&(len(x.slots)-1) != 0 || len(x.slots) < minIDSlots {
		return fmt.Errorf("ids: %d slots, mask %#x", len(x.slots), x.mask)
	}
	n := 0
	for i, s := range x.slots {
		if s.h == nil {
			continue
		}
		n++
		if s.hash != s.h.hash || s.hash != x.hash(s.h.task.ID) {
			return fmt.Errorf("ids: slot %d: hash %#x, holder says %#x, %q hashes to %#x", i, s.hash, s.h.hash, s.h.task.ID, x.hash(s.h.task.ID))
		}
		for j := s.hash & x.mask; j != uint64(i); j = (j + 1) & x.mask {
			if x.slots[j].h == nil {
				return fmt.Errorf("ids: %q at slot %d, home %d, cut off by empty slot %d", s.h.task.ID, i, s.hash&x.mask, j)
			}
		}
	}
	if n != x.n || 2*n > len(x.slots) {
		return fmt.Errorf("ids: %d holders, n %d, %d slots", n, x.n, len(x.slots))
	}
	return nil
}

// TestIDIndexAgainstMap drives an idIndex and a Go map with the same random
// finds, inserts and removes over a small key space, so that homes collide and
// probes wrap around the end of the slots, and checks after every step that the two
// agree on every key and that the index's invariants hold, through growth from the
// smallest size and back down to empty.
func TestIDIndexAgainstMap(t *testing.T) {
	for _, keys := range []int{3, 12, 40, 300} {
		t.Run(strconv.Itoa(keys), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(keys), 7))
			x := newIDIndex[int](0)
			ref := map[string]*holder[int]{}
			for step := range 20000 {
				id := "k" + strconv.Itoa(rng.IntN(keys))
				hv, got := x.find(id)
				if got != ref[id] {
					t.Fatalf("step %d: find(%q) = %p, map has %p", step, id, got, ref[id])
				}
				if got == nil {
					h := &holder[int]{task: Task[int]{ID: id}}
					x.insert(hv, h)
					ref[id] = h
				} else if rng.IntN(3) > 0 { // more removes than inserts: the index empties too
					x.remove(got)
					delete(ref, id)
				}
				if err := x.check(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if x.len() != len(ref) {
					t.Fatalf("step %d: len %d, map %d", step, x.len(), len(ref))
				}
			}
			for id, h := range ref {
				if x.get(id) != h {
					t.Fatalf("get(%q) = %p, map has %p", id, x.get(id), h)
				}
				x.remove(h)
			}
			if err := x.check(); err != nil || x.len() != 0 {
				t.Fatalf("after removing all: len %d, %v", x.len(), err)
			}
		})
	}
}

// TestIDIndexChurn keeps a window of live keys sliding over fresh ones, as a
// batcher under load does, and checks that the slots stay at the size the window
// needs: deletes leave nothing behind that would make the index grow.
func TestIDIndexChurn(t *testing.T) {
	x := newIDIndex[int](1000)
	size := len(x.slots)
	live := make([]*holder[int], 0, 1000)
	for i := range 200000 {
		id := "task-" + strconv.Itoa(i)
		hv, h := x.find(id)
		if h != nil {
			t.Fatalf("%q found before it was inserted", id)
		}
		h = &holder[int]{task: Task[int]{ID: id}}
		x.insert(hv, h)
		live = append(live, h)
		if len(live) == cap(live) {
			for _, h := range live[:500] {
				x.remove(h)
			}
			live = append(live[:0], live[500:]...)
		}
	}
	if err := x.check(); err != nil {
		t.Fatal(err)
	}
	if len(x.slots) != size {
		t.Fatalf("slots grew from %d to %d with at most %d live keys", size, len(x.slots), cap(live))
	}
}

// BenchmarkIDIndex is the batcher's use of its index, a find, an insert and a
// remove per task, with a window of live keys sliding over fresh ones, against a
// Go map doing the same.
func BenchmarkIDIndex(b *testing.B) {
	const window = 10000
	ids := make([]string, 1<<20)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench/%012d", i)
	}
	b.Run("index", func(b *testing.B) {
		x := newIDIndex[int](1024)
		hs := make([]holder[int], len(ids))
		for i := 0; b.Loop(); i++ {
			id := ids[i&(len(ids)-1)]
			h := &hs[i&(len(ids)-1)]
			h.task.ID = id
			hv, old := x.find(id)
			if old != nil {
				b.Fatal("found")
			}
			x.insert(hv, h)
			if i >= window {
				x.remove(&hs[(i-window)&(len(ids)-1)])
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		m := make(map[string]*holder[int], 1024)
		hs := make([]holder[int], len(ids))
		for i := 0; b.Loop(); i++ {
			id := ids[i&(len(ids)-1)]
			h := &hs[i&(len(ids)-1)]
			h.task.ID = id
			if m[id] != nil {
				b.Fatal("found")
			}
			m[id] = h
			if i >= window {
				delete(m, hs[(i-window)&(len(ids)-1)].task.ID)
			}
		}
	})
}
