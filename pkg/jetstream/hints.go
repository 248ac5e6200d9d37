package jetstream

import (
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
)

// hints remembers, per key, the stream sequence of the last message the feed applied:
// a lossy, fixed-size table (hintSlots slots by the subject's hash, 1 MiB), so that
// a publish of a key the feed has seen expects that sequence at once instead of
// reading the key first: one round trip instead of two.
//
// A hint may be wrong in every way (evicted, another key's, torn between its two
// words, out of date): a publish that expects a sequence that is not the key's last
// meets a wrong-sequence answer and falls back to the read, as after any conflict.
// No sequence of another key is ever a key's last, so a wrong hint never lands.
// When a hint may be used at all is Transport.hint's to say (last-writer-wins).
type hints struct {
	slots [hintSlots]struct{ key, seq atomic.Uint64 }
}

const hintSlots = 1 << 16

func hintKey(subject string) uint64 { return xxhash.Sum64String(subject) | 1 } // never 0: an empty slot

// note records that the feed applied seq, the subject's message.
func (h *hints) note(subject string, seq uint64) {
	k := hintKey(subject)
	s := &h.slots[k%hintSlots]
	s.key.Store(k)
	s.seq.Store(seq)
}

// get is the subject's last applied sequence, if the table has it.
func (h *hints) get(subject string) (uint64, bool) {
	k := hintKey(subject)
	s := &h.slots[k%hintSlots]
	if s.key.Load() != k {
		return 0, false
	}
	seq := s.seq.Load()
	return seq, seq != 0
}
