package state

// The arena holds the entries' event bytes in large slabs, so that a million entries
// are a few hundred objects for the garbage collector, not a million.
//
// A slab is append-only: bytes once written are never written again, and a slab that
// is dropped is never reused (its id is; its array is not). So a reader may keep a
// slice of an entry's bytes after the table's lock is released, for as long as it
// likes: it stays valid and unchanged even if the entry is overwritten, moved or
// removed in the meantime.
//
// Each record is an 8-byte header (the entry index that owned it when written, and the
// length of the bytes) and the event's bytes. A slab with nothing live left is dropped
// at once. The slabs other than the current one are compacted when their dead bytes
// outgrow half their live ones: the least live of them has its live records copied
// to the current slab and is dropped (compactable). So a slab is copied only when the
// arena needs the room, and the least live one first: when keys are written again in
// the order they were written (a saturated receiver's load), each slab dies whole and
// is dropped without a byte copied, where compacting each slab at half live (the rule
// before) copied about half of every record and held twice the live bytes; when they
// are written again at random, it copies a fifth less than that rule and holds about
// as much (1.6 times the live bytes against 1.5: BenchmarkChurn).

const (
	// slabSize is the capacity of a shared slab. 1 MiB: a few hundred slabs for a
	// full default table, and a compaction copies at most half of one.
	slabSize = 1 << 20
	// bigRecord is the size from which a record gets a slab of its own, so that one
	// large event neither wastes the tail of a shared slab nor pins a shared slab.
	bigRecord = slabSize / 4
	// headerSize is a record's header: the owning entry's index and the length.
	headerSize = 8
	noSlab     = ^uint32(0)
)

// slab is one block of records.
type slab struct {
	b    []byte // records; len is the used part. nil once dropped
	live int    // bytes of live records, headers included. Invariant: live <= len(b)
}

// arena is the table's byte store. Owned by the table's lock.
type arena struct {
	slabs []slab
	free  []uint32 // ids of dropped slabs
	cur   uint32   // the slab appended to; noSlab before the first record
	size  int64    // capacity of the slabs in use, in bytes (the arena's footprint)
	// used and live are the sums of len(b) and of live over the slabs in use.
	// Invariant: live <= used.
	used, live int64
}

func newArena() arena { return arena{cur: noSlab} }

// alloc stores raw as a record owned by entry ent and returns where its bytes start.
func (a *arena) alloc(ent uint32, raw []byte) (id, off uint32) {
	need := headerSize + len(raw)
	switch {
	case need >= bigRecord:
		id = a.newSlab(need)
	case a.cur == noSlab || cap(a.slabs[a.cur].b)-len(a.slabs[a.cur].b) < need:
		a.cur = a.newSlab(slabSize)
		id = a.cur
	default:
		id = a.cur
	}
	s := &a.slabs[id]
	off = uint32(len(s.b)) + headerSize
	s.b = appendUint32(appendUint32(s.b, ent), uint32(len(raw)))
	s.b = append(s.b, raw...)
	s.live += need
	a.used += int64(need)
	a.live += int64(need)
	return id, off
}

func (a *arena) newSlab(capacity int) uint32 {
	a.size += int64(capacity)
	s := slab{b: make([]byte, 0, capacity)}
	if n := len(a.free); n > 0 {
		id := a.free[n-1]
		a.free = a.free[:n-1]
		a.slabs[id] = s
		return id
	}
	a.slabs = append(a.slabs, s)
	return uint32(len(a.slabs) - 1)
}

// bytes returns the record's event bytes. The slice is never written again.
func (a *arena) bytes(id, off, n uint32) []byte {
	return a.slabs[id].b[off : off+n : off+n]
}

// release marks a record dead. A slab with nothing live left, other than the
// current one, is dropped at once. It returns the slab to compact now (compactable),
// or noSlab.
func (a *arena) release(id uint32, n uint32) (compact uint32) {
	s := &a.slabs[id]
	s.live -= headerSize + int(n)
	a.live -= headerSize + int64(n)
	if id != a.cur && s.live == 0 {
		a.drop(id)
	}
	return a.compactable()
}

// compactable returns the slab to compact, or noSlab: the least live slab other
// than the current one, once those slabs' dead bytes outgrow half their live bytes
// (so the arena stays within 1.5 times the live bytes and a slab or two). The least
// live slab is then less than two thirds live (they are, together): a compaction
// copies at most two thirds of a slab and frees at least a third of one.
func (a *arena) compactable() uint32 {
	used, live := a.used, a.live
	if a.cur != noSlab {
		used -= int64(len(a.slabs[a.cur].b))
		live -= int64(a.slabs[a.cur].live)
	}
	if 2*(used-live) <= live {
		return noSlab
	}
	best := noSlab
	for id := range a.slabs {
		s := &a.slabs[id]
		if uint32(id) == a.cur || s.b == nil {
			continue
		}
		// s.live/len(s.b) < b.live/len(b.b), without dividing.
		if b := &a.slabs[best%uint32(len(a.slabs))]; best == noSlab || s.live*len(b.b) < b.live*len(s.b) {
			best = uint32(id)
		}
	}
	return best
}

// drop forgets a slab. Readers that still hold slices of it keep its array alive.
func (a *arena) drop(id uint32) {
	a.size -= int64(cap(a.slabs[id].b))
	a.used -= int64(len(a.slabs[id].b))
	a.live -= int64(a.slabs[id].live)
	a.slabs[id] = slab{}
	a.free = append(a.free, id)
}

// records calls fn for every record of slab id, live or dead, with the entry that
// owned it when it was written and where its bytes are. fn must not alloc in slab id.
func (a *arena) records(id uint32, fn func(owner, off, n uint32)) {
	b := a.slabs[id].b
	for pos := 0; pos < len(b); {
		owner, n := readUint32(b[pos:]), readUint32(b[pos+4:])
		off := uint32(pos + headerSize)
		fn(owner, off, n)
		pos = int(off + n)
	}
}

func appendUint32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

func readUint32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
