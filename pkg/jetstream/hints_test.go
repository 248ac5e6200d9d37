package jetstream

import (
	"fmt"
	"testing"
)

func TestHints(t *testing.T) {
	h := new(hints)
	if _, ok := h.get("$KV.b.a"); ok {
		t.Fatal("a hint in an empty table")
	}
	h.note("$KV.b.a", 7)
	h.note("$KV.b.a", 9)
	if seq, ok := h.get("$KV.b.a"); !ok || seq != 9 {
		t.Fatalf("get after two notes: %d, %t; want the last, 9", seq, ok)
	}
	// Past hintSlots keys some are evicted, and none answers another's sequence.
	const n = 3 * hintSlots
	for i := range n {
		h.note(fmt.Sprintf("$KV.b.k%d", i), uint64(100+i))
	}
	kept := 0
	for i := range n {
		if seq, ok := h.get(fmt.Sprintf("$KV.b.k%d", i)); ok {
			if seq != uint64(100+i) {
				t.Fatalf("k%d: %d, another key's sequence", i, seq)
			}
			kept++
		}
	}
	if kept == 0 || kept > hintSlots {
		t.Fatalf("%d of %d keys kept in %d slots", kept, n, hintSlots)
	}
}
