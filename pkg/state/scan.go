package state

import (
	"errors"
	"fmt"
)

// ErrCompacted is returned by Next for a live scan that starts below the compacted
// revision: a deletion after that revision may have been forgotten (its tombstone
// was collected), so the scan could not be complete. Start over with a snapshot.
var ErrCompacted = errors.New("state: revision compacted")

// scanStep bounds the log slots one Next call reads under the lock, so that a reader
// far behind never holds writers up for long.
const scanStep = 4096

// Scan is a reader's position and filter. Next advances After.
type Scan struct {
	// After: entries with a revision above it are read. Advanced by Next to the last
	// revision it read (kept or not).
	After uint64
	// UpTo, if not 0, stops the scan at this revision (inclusive).
	UpTo uint64
	// Deletions: include deleted entries, and refuse (ErrCompacted) a scan whose
	// After is below the compacted revision. Without it (a snapshot, a listing)
	// deleted entries are skipped and compaction does not matter.
	Deletions bool
	// PastCompaction, with Deletions, reads on from below the compacted revision
	// instead of refusing: for a reader that learns of collected tombstones another
	// way (the --data-dir writer gets them from Collect).
	PastCompaction bool
	// Keep, if set, selects entries. It must not call the table.
	Keep func(*Entry) bool
	// MaxEntries and MaxBytes bound one Next call's result; Cost measures an entry
	// against MaxBytes (default len(Raw)). The first entry is always taken.
	MaxEntries int
	MaxBytes   int
	Cost       func(*Entry) int
}

// Next appends to buf the next entries of s in revision order and advances s.After
// past what it read. It returns no entries once s has read everything (up to UpTo,
// or up to the latest revision); Done tells which.
func (t *Table) Next(s *Scan, buf []Entry) ([]Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.Deletions && !s.PastCompaction && s.After < t.st.Compacted {
		return buf, fmt.Errorf("%w: revision %d is below %d, the oldest this node can resume from", ErrCompacted, s.After, t.st.Compacted)
	}
	p := t.log.after(s.After)
	bytes := 0
	for n := 0; n < scanStep; n++ {
		rev, ent, next, ok := t.log.at(p)
		if !ok || (s.UpTo != 0 && rev > s.UpTo) {
			// Nothing is left up to the end: the latest revision's slot may be
			// gone (its entry removed and the chunk compacted), so move past it.
			s.After = max(s.After, t.end(s))
			break
		}
		e := t.ent(ent)
		if e.rev != rev || (e.deleted && !s.Deletions) {
			s.After, p = rev, next // dead slot, or a deletion a snapshot omits
			continue
		}
		// The entry is read into buf's next slot, so the filters see it without it
		// escaping to the heap; a rejected one is taken back off.
		buf = append(buf, t.read(e))
		en := &buf[len(buf)-1]
		if s.Keep != nil && !s.Keep(en) {
			buf = buf[:len(buf)-1]
			s.After, p = rev, next
			continue
		}
		c := len(en.Raw)
		if s.Cost != nil {
			c = s.Cost(en)
		}
		if len(buf) > 1 && (len(buf) > s.MaxEntries || bytes+c > s.MaxBytes) {
			buf = buf[:len(buf)-1]
			break
		}
		bytes += c
		s.After, p = rev, next
	}
	return buf, nil
}

// Done reports whether s has read everything up to UpTo (or the latest revision).
func (t *Table) Done(s *Scan) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return s.After >= t.end(s)
}

// end is the last revision s reads. Caller holds mu.
func (t *Table) end(s *Scan) uint64 {
	if s.UpTo != 0 {
		return min(t.rev, s.UpTo)
	}
	return t.rev
}

// Changed returns a channel that is closed once the table holds a revision above
// after: at once if it already does.
func (t *Table) Changed(after uint64) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rev > after {
		return t.closed
	}
	t.waiting = true
	return t.changed
}

// CheckResume reports whether a live scan may start after rev: ErrCompacted below
// the compacted revision, an error above the latest (a revision of another table,
// e.g. from before a restart with the clock set back).
func (t *Table) CheckResume(rev uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case rev < t.st.Compacted:
		return fmt.Errorf("%w: revision %d is below %d, the oldest this node can resume from", ErrCompacted, rev, t.st.Compacted)
	case rev > t.rev:
		return fmt.Errorf("%w: revision %d is above this node's latest, %d (was it restarted?)", ErrCompacted, rev, t.rev)
	}
	return nil
}
