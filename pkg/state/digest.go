package state

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// The digest tree lets two nodes find the keys on which their tables differ without
// sending the keys (anti-entropy). Every entry hashes to 64 bits from
// (task_id, version, origin, deleted); a leaf is the XOR of the hashes of its entries,
// the entries whose task_id's xxhash64 starts with the leaf's DigestLeafBits; every
// inner node is the XOR of its DigestFanout children, so a node's hash is the XOR of
// every entry below it. XOR makes the tree incremental: a change XORs the entry's old
// hash out and its new hash in along one path of DigestLevels+1 nodes.
//
// The hashes are the same on every node (xxhash64, no seed), unlike the index's
// seeded hash, so two tables holding the same entries have the same tree.
const (
	// DigestTreeVersion names the tree's shape and hashing, for the wire.
	DigestTreeVersion = 1
	// DigestFanout is the children per inner node.
	DigestFanout = 16
	// DigestLevels is the depth of the leaves; level 0 is the root.
	DigestLevels = 4
	// DigestLeafBits: 65,536 leaves, about 15 keys each at a million keys.
	DigestLeafBits = 16
	// DigestLeaves is the number of leaves.
	DigestLeaves = 1 << DigestLeafBits
)

// digestTree holds every level's node hashes in one array, the root first. 69,905
// hashes: 546 KiB per table. Owned by the table's lock.
type digestTree struct {
	h []uint64
}

// levelOffset[l] is where level l starts in h.
var levelOffset = [DigestLevels + 2]int{0, 1, 17, 273, 4369, 69905}

func newDigestTree() digestTree { return digestTree{h: make([]uint64, levelOffset[DigestLevels+1])} }

// toggle XORs x into leaf and every node above it.
func (d *digestTree) toggle(leaf uint32, x uint64) {
	i := leaf
	for l := DigestLevels; l >= 0; l-- {
		d.h[levelOffset[l]+int(i)] ^= x
		i /= DigestFanout
	}
}

// LeafOf is the digest leaf of key.
func LeafOf(key []byte) uint32 { return uint32(xxhash.Sum64(key) >> (64 - DigestLeafBits)) }

// entryHash is the digest hash of one entry. keyHash is xxhash64 of the key,
// originHash of the origin.
func entryHash(keyHash, version, originHash uint64, deleted bool) uint64 {
	d := uint64(0)
	if deleted {
		d = 1
	}
	return mix(keyHash ^ mix(version^mix(originHash+d)))
}

// mix is SplitMix64's finalizer: every input bit flips about half the output bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// digestOf is entry e's leaf and hash. Caller holds mu.
func (t *Table) digestOf(e *entry) (uint32, uint64) {
	kh := xxhash.Sum64(t.keyOf(e))
	return uint32(kh >> (64 - DigestLeafBits)), t.entryDigest(e, kh)
}

// entryDigest is entry e's hash, given its key's xxhash kh. Caller holds mu.
func (t *Table) entryDigest(e *entry, kh uint64) uint64 {
	return entryHash(kh, e.version, t.origins.hash(e.origin), e.deleted)
}

// DigestRoot is the root hash: equal on two tables that hold the same entries.
func (t *Table) DigestRoot() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.digest.h[0]
}

// DigestChildren appends to out the DigestFanout child hashes of each of nodes, which
// are node indexes of level (0..DigestLevels-1). It reports false, appending nothing,
// for a level or node out of range.
func (t *Table) DigestChildren(level int, nodes []uint32, out []uint64) ([]uint64, bool) {
	if level < 0 || level >= DigestLevels {
		return out, false
	}
	width := uint32(levelOffset[level+1] - levelOffset[level])
	for _, n := range nodes {
		if n >= width {
			return out, false
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	child := levelOffset[level+1]
	for _, n := range nodes {
		first := child + int(n)*DigestFanout
		out = append(out, t.digest.h[first:first+DigestFanout]...)
	}
	return out, true
}

// LeafSet is a set of digest leaves. The zero value is empty.
type LeafSet struct {
	bits [DigestLeaves / 64]uint64
	n    int
}

// Add puts leaf in the set. Leaves out of range are ignored.
func (s *LeafSet) Add(leaf uint32) {
	if leaf >= DigestLeaves || s.Has(leaf) {
		return
	}
	s.bits[leaf/64] |= 1 << (leaf % 64)
	s.n++
}

// Has reports whether leaf is in the set.
func (s *LeafSet) Has(leaf uint32) bool {
	return leaf < DigestLeaves && s.bits[leaf/64]&(1<<(leaf%64)) != 0
}

// Len is the number of leaves in the set.
func (s *LeafSet) Len() int { return s.n }

// Leaves appends the set's leaves to out, ascending.
func (s *LeafSet) Leaves(out []uint32) []uint32 {
	for w, b := range s.bits {
		for b != 0 {
			out = append(out, uint32(w*64+bits.TrailingZeros64(b)))
			b &= b - 1
		}
	}
	return out
}

// scanLeavesStep bounds the entries one step of ScanLeaves looks at under the lock.
const scanLeavesStep = pageSize

// ScanLeaves calls fn with every entry (tombstones included) whose key is in one of
// leaves, until fn returns false. It reads the entries a bounded step at a time and
// calls fn without the lock; an entry changed during the scan may be seen at either
// state, or missed if it moved (anti-entropy's next round finds it). Entries alias
// the arena, as Get's do.
func (t *Table) ScanLeaves(leaves *LeafSet, fn func(e *Entry) bool) {
	var buf []Entry
	for next := uint32(0); ; {
		buf = buf[:0]
		t.mu.Lock()
		end := min(t.nents, next+scanLeavesStep)
		for i := next; i < end; i++ {
			if e := t.ent(i); e.rev != 0 && leaves.Has(uint32(e.leaf)) {
				buf = append(buf, t.read(e))
			}
		}
		t.mu.Unlock()
		for i := range buf {
			if !fn(&buf[i]) {
				return
			}
		}
		if end <= next {
			return
		}
		next = end
	}
}
