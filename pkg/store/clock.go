package store

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// The clock's high-water mark is kept as merge operands under metaClock, each an
// 8-byte big-endian version, which pebble folds into their maximum. A Commit adds its
// highest Version as one operand in its own batch, so the mark is saved atomically
// with the records, and commits that land in any order leave the maximum: a plain Set
// would leave whichever landed last.

// clockMergerName is saved on disk; pebble refuses to open a store with another.
const clockMergerName = "fanout.clock.max.v1"

// clockMerger is the merge operator of every store.
func clockMerger() *pebble.Merger {
	return &pebble.Merger{Name: clockMergerName, Merge: newMaxMerger}
}

func newMaxMerger(_, value []byte) (pebble.ValueMerger, error) {
	m := &maxMerger{}
	return m, m.add(value)
}

// maxMerger folds clock operands into their maximum.
type maxMerger struct{ max uint64 }

func (m *maxMerger) add(v []byte) error {
	c, err := decodeClock(v)
	m.max = max(m.max, c)
	return err
}

func (m *maxMerger) MergeNewer(v []byte) error { return m.add(v) }
func (m *maxMerger) MergeOlder(v []byte) error { return m.add(v) }

func (m *maxMerger) Finish(bool) ([]byte, io.Closer, error) {
	return encodeClock(m.max), nil, nil
}

func encodeClock(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func decodeClock(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("store: clock value of %d bytes, must be 8", len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
