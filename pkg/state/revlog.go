package state

import "sort"

// The revision log orders the entries by the revision of their last change, so that
// "every key changed after revision R" is a binary search and a forward scan.
//
// Every change appends a slot (revision, entry) at the tail. The entry's previous slot
// is not touched: it is dead from then on, because the entry's revision no longer
// matches it (revisions are never reused, so the test is exact). Scans skip dead
// slots. Each chunk counts its live slots; a chunk that is at least half dead is
// compacted in place and merged with a neighbour when the two fit in one chunk, so
// the log holds O(live entries) slots and the work is O(1) amortised per change, with
// no pause longer than one chunk's worth.

// chunkSlots is the capacity of a chunk. 1024: a compaction touches at most 1024
// entries (tens of microseconds), and a million entries are about a thousand chunks.
const chunkSlots = 1024

// chunk is a run of slots in revision order.
type chunk struct {
	id   uint32   // index in revlog.byID; entries name their chunk by it
	revs []uint64 // ascending
	ents []uint32 // ents[i] is the entry that had revision revs[i]
	live int      // slots whose entry still has that revision. Invariant: live <= len(revs)
}

// revlog is the log. Owned by the table's lock.
type revlog struct {
	chunks []*chunk // in revision order; the last one is the tail
	byID   []*chunk // nil where the id is free
	free   []uint32
}

// add appends the slot (rev, ent) and returns the id of the chunk holding it. rev is
// above every revision in the log. When the tail fills and a new one starts, the old
// tail is returned if it is at least half dead: it was exempt from compaction while it
// was the tail, and might see no further deaths to trigger one.
func (l *revlog) add(rev uint64, ent uint32) (id uint32, compact *chunk) {
	var c *chunk
	if n := len(l.chunks); n > 0 && len(l.chunks[n-1].revs) < chunkSlots {
		c = l.chunks[n-1]
	} else {
		if n > 0 && halfDead(l.chunks[n-1]) {
			compact = l.chunks[n-1]
		}
		c = l.newChunk()
		l.chunks = append(l.chunks, c)
	}
	c.revs = append(c.revs, rev)
	c.ents = append(c.ents, ent)
	c.live++
	return c.id, compact
}

func halfDead(c *chunk) bool { return (len(c.revs)-c.live)*2 >= len(c.revs) }

func (l *revlog) newChunk() *chunk {
	c := &chunk{revs: make([]uint64, 0, chunkSlots), ents: make([]uint32, 0, chunkSlots)}
	if n := len(l.free); n > 0 {
		c.id = l.free[n-1]
		l.free = l.free[:n-1]
		l.byID[c.id] = c
	} else {
		c.id = uint32(len(l.byID))
		l.byID = append(l.byID, c)
	}
	return c
}

// kill notes that one slot of chunk id died. It reports the chunk when it should be
// compacted: it is not the tail and at least half of it is dead.
func (l *revlog) kill(id uint32) *chunk {
	c := l.byID[id]
	c.live--
	if c == l.chunks[len(l.chunks)-1] || !halfDead(c) {
		return nil
	}
	return c
}

// compact drops the dead slots of c (isLive tells a slot's fate) and merges it with a
// neighbour when both fit in one chunk. moved is called for every live slot that
// changes chunk, with its entry and the new chunk's id.
func (l *revlog) compact(c *chunk, isLive func(rev uint64, ent uint32) bool, moved func(ent, to uint32)) {
	pos := l.position(c)
	k := 0
	for i, rev := range c.revs {
		if isLive(rev, c.ents[i]) {
			c.revs[k], c.ents[k] = rev, c.ents[i]
			k++
		}
	}
	c.revs, c.ents = c.revs[:k], c.ents[:k]
	switch {
	case k == 0:
		l.remove(pos)
	case pos > 0 && len(l.chunks[pos-1].revs)+k <= chunkSlots:
		l.merge(l.chunks[pos-1], c, moved)
		l.remove(pos)
	case pos+2 < len(l.chunks) && len(l.chunks[pos+1].revs)+k <= chunkSlots: // never into the tail
		next := l.chunks[pos+1]
		if next.live < len(next.revs) {
			return // next has dead slots of its own; its compaction will merge it
		}
		l.merge(c, next, moved)
		l.remove(pos + 1)
	}
}

// merge appends src's slots (all live) to dst.
func (l *revlog) merge(dst, src *chunk, moved func(ent, to uint32)) {
	for _, ent := range src.ents {
		moved(ent, dst.id)
	}
	dst.revs = append(dst.revs, src.revs...)
	dst.ents = append(dst.ents, src.ents...)
	dst.live += src.live
}

// position is the index of c in chunks. c is not empty.
func (l *revlog) position(c *chunk) int {
	first := c.revs[0]
	return sort.Search(len(l.chunks), func(i int) bool { return l.chunks[i].revs[0] >= first })
}

func (l *revlog) remove(pos int) {
	c := l.chunks[pos]
	copy(l.chunks[pos:], l.chunks[pos+1:])
	l.chunks[len(l.chunks)-1] = nil
	l.chunks = l.chunks[:len(l.chunks)-1]
	l.byID[c.id] = nil
	l.free = append(l.free, c.id)
}

// cursor is a position in the log: chunk index and slot index.
type cursor struct{ c, i int }

// after returns the position of the first slot with a revision above rev.
func (l *revlog) after(rev uint64) cursor {
	c := sort.Search(len(l.chunks), func(i int) bool {
		revs := l.chunks[i].revs
		return revs[len(revs)-1] > rev
	})
	if c == len(l.chunks) {
		return cursor{c: c}
	}
	revs := l.chunks[c].revs
	return cursor{c: c, i: sort.Search(len(revs), func(i int) bool { return revs[i] > rev })}
}

// at returns the slot at p and the position after it; ok is false at the end.
func (l *revlog) at(p cursor) (rev uint64, ent uint32, next cursor, ok bool) {
	if p.c >= len(l.chunks) {
		return 0, 0, p, false
	}
	c := l.chunks[p.c]
	rev, ent = c.revs[p.i], c.ents[p.i]
	if p.i+1 < len(c.revs) {
		return rev, ent, cursor{p.c, p.i + 1}, true
	}
	return rev, ent, cursor{p.c + 1, 0}, true
}

// slots counts every slot, live or dead.
func (l *revlog) slots() int {
	n := 0
	for _, c := range l.chunks {
		n += len(c.revs)
	}
	return n
}
