package batcher

import "hash/maphash"

// idIndex maps every task_id that is pending, in flight or both to its holder:
// open addressing with linear probing over one array of (hash, holder) slots.
//
// It replaces a Go map[string]*holder, which cost the busiest node a fifth of its
// CPU at saturation (docs/BENCHMARKS.md, "the batcher's task_id index"): every task
// is inserted on accept and deleted when it lands, so the map's slots churn, and a
// Go map marks deleted slots as tombstones that lengthen the probes until it grows.
// Here a delete shifts the following slots back (Knuth's algorithm R), so no
// tombstone is ever left and a probe stays as short as the load allows. A holder
// keeps its own hash, so a delete hashes nothing and compares pointers, not strings.
//
// Not safe for concurrent use: like the rest of core, the acceptor owns it.
type idIndex[T any] struct {
	seed maphash.Seed
	// slots has a power-of-two length; a slot with a nil holder is empty. Every
	// holder sits at or after (cyclically) its home, hash & mask, with no empty slot
	// between: a probe from the home that meets an empty slot may stop.
	// Invariant: 0 <= n <= len(slots)/2, so there is always an empty slot.
	slots []idSlot[T]
	mask  uint64 // len(slots) - 1
	n     int    // holders in slots
}

// idSlot is one slot of idIndex. hash is holder.hash, kept here so a probe reads
// one array and dereferences only a holder whose hash matches.
type idSlot[T any] struct {
	hash uint64
	h    *holder[T]
}

// minIDSlots is the least length of idIndex.slots: 8 holders at half load.
const minIDSlots = 16

// newIDIndex returns an index sized for about capacity holders without growing.
func newIDIndex[T any](capacity int) idIndex[T] {
	n := minIDSlots
	for n < 2*capacity {
		n *= 2
	}
	return idIndex[T]{seed: maphash.MakeSeed(), slots: make([]idSlot[T], n), mask: uint64(n - 1)}
}

// len is how many holders the index holds.
func (x *idIndex[T]) len() int { return x.n }

// hash is id's hash, for find's result and insert.
func (x *idIndex[T]) hash(id string) uint64 { return maphash.String(x.seed, id) }

// find returns id's hash and its holder, nil if id is in no holder.
func (x *idIndex[T]) find(id string) (uint64, *holder[T]) {
	hv := x.hash(id)
	for i := hv & x.mask; ; i = (i + 1) & x.mask {
		s := &x.slots[i]
		if s.h == nil {
			return hv, nil
		}
		if s.hash == hv && s.h.task.ID == id {
			return hv, s.h
		}
	}
}

// get is find without the hash.
func (x *idIndex[T]) get(id string) *holder[T] {
	_, h := x.find(id)
	return h
}

// insert adds h, whose task.ID hashes to hv (find's result) and is in no holder
// of the index, and records hv in h.
func (x *idIndex[T]) insert(hv uint64, h *holder[T]) {
	if 2*(x.n+1) > len(x.slots) {
		x.grow()
	}
	h.hash = hv
	x.place(hv, h)
	x.n++
}

// place puts h in the first empty slot from hv's home.
func (x *idIndex[T]) place(hv uint64, h *holder[T]) {
	i := hv & x.mask
	for x.slots[i].h != nil {
		i = (i + 1) & x.mask
	}
	x.slots[i] = idSlot[T]{hash: hv, h: h}
}

// grow doubles the slots and places every holder again.
func (x *idIndex[T]) grow() {
	old := x.slots
	x.slots = make([]idSlot[T], 2*len(old))
	x.mask = uint64(len(x.slots) - 1)
	for _, s := range old {
		if s.h != nil {
			x.place(s.hash, s.h)
		}
	}
}

// remove takes h, which the index holds, out, and shifts back the holders after it
// that would otherwise be cut off from their homes by the empty slot.
func (x *idIndex[T]) remove(h *holder[T]) {
	i := h.hash & x.mask
	for x.slots[i].h != h {
		i = (i + 1) & x.mask
	}
	for j := (i + 1) & x.mask; ; j = (j + 1) & x.mask {
		s := x.slots[j]
		if s.h == nil {
			break
		}
		// s may move to the hole at i unless its home lies cyclically in (i, j]:
		// then it would sit before its home.
		if (j-s.hash)&x.mask >= (j-i)&x.mask {
			x.slots[i] = s
			i = j
		}
	}
	x.slots[i] = idSlot[T]{}
	x.n--
}
