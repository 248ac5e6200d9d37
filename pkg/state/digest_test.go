package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// checkDigest: the incremental tree equals the tree built from the model's entries,
// the way another node holding the same entries would have it.
func (h *harness) checkDigest() {
	want := newDigestTree()
	for key, e := range h.ref.m {
		kh := xxhash.Sum64String(key)
		want.toggle(uint32(kh>>(64-DigestLeafBits)), entryHash(kh, e.stamp.Version, xxhash.Sum64String(e.stamp.Origin), e.deleted))
	}
	h.tab.mu.Lock()
	defer h.tab.mu.Unlock()
	for i, x := range want.h {
		if h.tab.digest.h[i] != x {
			h.t.Fatalf("digest node %d = %x, built from the model's entries %x", i, h.tab.digest.h[i], x)
		}
	}
}

func put(t *testing.T, tab *Table, key string, v uint64, origin string, del bool) {
	t.Helper()
	raw := []byte("ev:" + key)
	tab.Put(&Write{Key: raw[3:], KeyOffset: 3, Raw: raw, Stamp: Stamp{Version: v, Origin: origin}, Deleted: del}, time.Now())
}

// Two tables that reach the same entries by different histories have the same tree;
// one differing entry changes the root and exactly one leaf.
func TestDigestSameEntriesSameTree(t *testing.T) {
	cfg := Config{MaxKeys: 10000, MaxBytes: 1 << 24, TombstoneTTL: time.Hour}
	a, _ := New(cfg)
	b, _ := New(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		key := fmt.Sprintf("svc/%d", i)
		put(t, a, key, uint64(10+rng.IntN(5)), "a", false) // older history first
		put(t, a, key, 100, "n1", i%10 == 0)
	}
	for i := 1999; i >= 0; i-- {
		put(t, b, fmt.Sprintf("svc/%d", i), 100, "n1", i%10 == 0)
	}
	if a.DigestRoot() != b.DigestRoot() {
		t.Fatalf("same entries, roots %x and %x", a.DigestRoot(), b.DigestRoot())
	}
	for _, change := range []struct {
		name string
		do   func()
	}{
		{"a newer version", func() { put(t, b, "svc/7", 101, "n1", false) }},
		{"the same version from another origin", func() { put(t, b, "svc/7", 101, "n2", false) }},
		{"a deletion at a newer version", func() { put(t, b, "svc/7", 102, "n2", true) }},
	} {
		put(t, a, "svc/7", 0, "", false) // no-op: stale
		before := b.DigestRoot()
		change.do()
		if b.DigestRoot() == before {
			t.Errorf("%s: root unchanged", change.name)
		}
		leaf := LeafOf([]byte("svc/7"))
		var diff []int
		for i := range a.digest.h[levelOffset[DigestLevels]:] {
			if a.digest.h[levelOffset[DigestLevels]+i] != b.digest.h[levelOffset[DigestLevels]+i] {
				diff = append(diff, i)
			}
		}
		if len(diff) != 1 || diff[0] != int(leaf) {
			t.Errorf("%s: leaves differing %v, want [%d]", change.name, diff, leaf)
		}
	}
}

func TestDigestChildrenAndScanLeaves(t *testing.T) {
	tab, _ := New(Config{MaxKeys: 100000, MaxBytes: 1 << 26, TombstoneTTL: time.Hour})
	byLeaf := map[uint32][]string{}
	for i := range 20000 { // more than one scan step
		key := fmt.Sprintf("k%d", i)
		put(t, tab, key, 5, "o", i%3 == 0)
		byLeaf[LeafOf([]byte(key))] = append(byLeaf[LeafOf([]byte(key))], key)
	}
	// The root's children XOR to the root.
	kids, ok := tab.DigestChildren(0, []uint32{0}, nil)
	if !ok || len(kids) != DigestFanout {
		t.Fatalf("DigestChildren(0, [0]) = %d hashes, %v", len(kids), ok)
	}
	var x uint64
	for _, k := range kids {
		x ^= k
	}
	if x != tab.DigestRoot() {
		t.Errorf("children XOR to %x, root %x", x, tab.DigestRoot())
	}
	for _, bad := range []struct {
		level int
		nodes []uint32
	}{{-1, []uint32{0}}, {DigestLevels, []uint32{0}}, {0, []uint32{1}}, {3, []uint32{4096}}} {
		if out, ok := tab.DigestChildren(bad.level, bad.nodes, nil); ok || len(out) != 0 {
			t.Errorf("DigestChildren(%d, %v) accepted", bad.level, bad.nodes)
		}
	}
	var set LeafSet
	want := map[string]bool{}
	for leaf, keys := range byLeaf {
		if leaf%7 == 0 {
			set.Add(leaf)
			set.Add(leaf) // counted once
			for _, k := range keys {
				want[k] = true
			}
		}
	}
	if got := len(set.Leaves(nil)); got != set.Len() {
		t.Fatalf("Leaves lists %d, Len %d", got, set.Len())
	}
	got := map[string]bool{}
	tab.ScanLeaves(&set, func(e *Entry) bool {
		if got[e.String()] {
			t.Errorf("%s seen twice", e.String())
		}
		got[string(e.Key)] = true
		return true
	})
	if len(got) != len(want) {
		t.Fatalf("ScanLeaves saw %d entries, want %d", len(got), len(want))
	}
	for k := range want {
		if !got[k] {
			t.Errorf("ScanLeaves missed %s", k)
		}
	}
}

// A deletion older than the tombstone TTL of a key the table does not hold is not
// stored; one of a key it holds is, and is collected by its origin's time.
func TestExpiredDeletion(t *testing.T) {
	ttl := time.Hour
	tab, _ := New(Config{MaxKeys: 10, MaxBytes: 1 << 20, TombstoneTTL: ttl})
	now := time.Unix(1_800_000_000, 0)
	old := now.Add(-2 * ttl).UnixNano()
	raw := []byte("ev:gone")
	w := &Write{Key: raw[3:], KeyOffset: 3, Raw: raw, Stamp: Stamp{Version: 9, Origin: "o"}, Submitted: old, Deleted: true}
	if r := tab.Put(w, now); r.Outcome != Stale {
		t.Fatalf("expired deletion of an absent key: %+v, want Stale", r)
	}
	w.Stamp.Version = 5
	w.Deleted = false
	w.Submitted = now.UnixNano()
	tab.Put(w, now)
	w.Stamp.Version, w.Deleted, w.Submitted = 9, true, old
	if r := tab.Put(w, now); r.Outcome != Applied {
		t.Fatalf("expired deletion of a held key: %+v, want Applied", r)
	}
	if n := tab.Collect(now); n != 1 {
		t.Fatalf("collected %d, want the expired tombstone", n)
	}
}
