package state

import (
	"math/rand/v2"
	"testing"
)

// TestIndexAgainstMap inserts and removes entries whose hashes crowd the last slots
// of the table (so probe runs wrap around and deletions shift across the end) and
// checks after every step that exactly the live entries are found.
func TestIndexAgainstMap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hashes []uint64
		max    int
	}{
		{"crowded at the end", []uint64{61, 62, 63, 63 + 64, 63 + 128, 0, 1}, 40},
		{"one hash", []uint64{7}, 30},
		{"spread, through growth", nil, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.max)))
			var x index
			live := map[uint32]uint64{} // entry -> hash
			next := uint32(0)
			hashOf := func() uint64 {
				if tc.hashes == nil {
					return rng.Uint64()
				}
				return tc.hashes[rng.IntN(len(tc.hashes))]
			}
			for step := range 20000 {
				if len(live) < tc.max && (len(live) == 0 || rng.IntN(4) != 0) { // grow to max
					h := hashOf()
					x.insert(h, next)
					live[next] = h
					next++
				} else {
					for e, h := range live { // map order: a random live entry
						x.remove(h, e)
						delete(live, e)
						break
					}
				}
				if x.n != len(live) {
					t.Fatalf("step %d: index counts %d, %d live", step, x.n, len(live))
				}
				if len(live) > 100 && step%97 != 0 {
					continue // the full check walks every live entry
				}
				for e, h := range live {
					if got := x.find(h, func(c uint32) bool { return c == e }); got != e {
						t.Fatalf("step %d: entry %d (hash %d) not found (got %d)", step, e, h, got)
					}
				}
				if got := x.find(hashOf(), func(c uint32) bool { _, ok := live[c]; return !ok }); got != none {
					t.Fatalf("step %d: found removed entry %d", step, got)
				}
			}
		})
	}
}
