package state

// index maps key hashes to entries: open addressing with linear probing over two
// pointer-free arrays. Each slot holds an entry number + 1 (0: empty) and that
// entry's key hash, so a probe compares hashes first and reads a key only on a match;
// keys whose hashes collide are told apart by the caller's eq. Deletion shifts the
// rest of the probe run back (no tombstones), so a lookup stops at the first empty
// slot. It replaced a map[uint64]uint32 plus a collision chain in every entry: 24
// bytes per slot at a load of at most 3/4 against the map's ~38 per key, and 12 bytes
// less in every entry. Owned by the table's lock.
type index struct {
	slots  []uint32 // entry + 1, or 0. len is a power of two (or 0)
	hashes []uint64 // hashes[i] is the hash of slots[i]'s key
	n      int      // occupied slots. Invariant: 4*n <= 3*len(slots)
}

// minSlots is the first allocation: small tables stay small.
const minSlots = 64

// find returns the entry whose key hashes to h and satisfies eq, or none.
func (x *index) find(h uint64, eq func(ent uint32) bool) uint32 {
	if x.n == 0 {
		return none
	}
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return none
		}
		if x.hashes[i] == h && eq(s-1) {
			return s - 1
		}
	}
}

// insert adds entry ent with hash h. ent is not in the index.
func (x *index) insert(h uint64, ent uint32) {
	if 4*(x.n+1) > 3*len(x.slots) {
		x.grow()
	}
	x.place(h, ent)
	x.n++
}

func (x *index) place(h uint64, ent uint32) {
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i], x.hashes[i] = ent+1, h
}

// grow doubles the slots and places every entry again. The pause is one pass over
// the slots (a few tens of milliseconds at a million keys), once per doubling.
func (x *index) grow() {
	slots, hashes := x.slots, x.hashes
	size := max(minSlots, 2*len(slots))
	x.slots, x.hashes = make([]uint32, size), make([]uint64, size)
	for i, s := range slots {
		if s != 0 {
			x.place(hashes[i], s-1)
		}
	}
}

// remove takes entry ent, whose key hashes to h, out of the index.
func (x *index) remove(h uint64, ent uint32) {
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for x.slots[i] != ent+1 {
		i = (i + 1) & mask
	}
	// Shift back every later slot of the run that may not stay behind the hole: one
	// whose home slot is not cyclically in (i, j].
	for j := (i + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		home := x.hashes[j] & mask
		if (i <= j && i < home && home <= j) || (i > j && (i < home || home <= j)) {
			continue
		}
		x.slots[i], x.hashes[i] = x.slots[j], x.hashes[j]
		i = j
	}
	x.slots[i], x.hashes[i] = 0, 0
	x.n--
}

// bytes is the index's footprint.
func (x *index) bytes() int64 { return int64(len(x.slots)) * 12 }
