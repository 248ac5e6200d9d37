package store

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// ErrDiskFull wraps a write refused because the data dir's file system has less free
// space than Config.MinFreeBytes. Nothing was written; the same write succeeds once
// there is room again.
var ErrDiskFull = errors.New("store: disk full")

// ErrFailed wraps a write that pebble failed with an error it cannot go on from (an
// I/O error in its log or manifest), and every write after it until the store has
// reopened pebble (Store.recover), which the next write tries.
var ErrFailed = errors.New("store: failed")

// DefaultMinFreeBytes is Config.MinFreeBytes's default: 64 MiB, room for what pebble
// may write after the last commit it is given before the floor: that commit (the node
// commits at most 8 MiB of records at once), the flush of a full memtable (4 MiB),
// the compactions that follow on a store of a few tens of MiB, and a new MANIFEST.
const DefaultMinFreeBytes = 64 << 20

// fatalPanic is what pebbleLogger.Fatalf panics with: guard turns it into ErrFailed
// on the goroutine that called the store.
type fatalPanic struct{ msg string }

// guard recovers a fatalPanic raised under a store call (pebble calls Fatalf on the
// committing goroutine when its log write fails), marks the store failed and sets
// *err. Any other panic goes on. Use as: defer s.guard(&err).
func (s *Store) guard(err *error) {
	r := recover()
	if r == nil {
		return
	}
	f, ok := r.(fatalPanic)
	if !ok {
		panic(r)
	}
	*err = s.fail(f.msg)
}

// fail marks the store failed with msg and returns the error every later write gets.
func (s *Store) fail(msg string) error {
	err := fmt.Errorf("%w: %s; the next write reopens it", ErrFailed, msg)
	if s.failed.CompareAndSwap(nil, &err) {
		s.fatals.Add(1)
		s.log.Error("data dir: pebble failed; the next write reopens it", "err", msg, "data_dir", s.dir)
	}
	return *s.failed.Load()
}

// writable returns nil if a write may go to pebble now: the store has not failed and
// its file system has at least MinFreeBytes free. Otherwise it returns the reason,
// wrapping ErrFailed or ErrDiskFull, and counts it.
func (s *Store) writable() error {
	if f := s.failed.Load(); f != nil {
		return *f
	}
	return s.checkFloor()
}

// checkFloor returns ErrDiskFull if the file system has less than MinFreeBytes free.
func (s *Store) checkFloor() error { return s.checkRoom(s.minFree) }

// checkRoom returns ErrDiskFull if the file system has less than floor bytes free,
// and counts it.
func (s *Store) checkRoom(floor int64) error {
	if floor <= 0 {
		return nil
	}
	free, err := s.statfs(s.dir)
	if err != nil {
		// Not a reason to refuse: the write itself says whether the disk works.
		s.log.Warn("data dir: reading the free space failed", "err", err, "data_dir", s.dir)
		return nil
	}
	s.freeBytes.Store(free)
	if free >= uint64(floor) {
		s.full.Store(false)
		return nil
	}
	s.full.Store(true)
	s.diskFull.Add(1)
	return fmt.Errorf("%w: %s free on %s, below the floor of %s (--data-dir-min-free-bytes): free some space; commits resume by themselves",
		ErrDiskFull, byteSize(free), s.dir, byteSize(uint64(floor)))
}

// reopenMinFree is the least free space a failed store is reopened with, whatever
// MinFreeBytes: pebble's Open flushes the memtable it recovers from the log (up to
// 4 MiB) and writes a new MANIFEST and log, and on a disk with no room its flush
// fails and is retried at once, without end, and Open does not return.
const reopenMinFree = 16 << 20

// backgroundLogEvery spaces the logs of pebble's background errors: a flush that
// fails for want of room is retried at once, thousands of times a second.
const backgroundLogEvery = 10 * time.Second

// backgroundError logs a failed flush or compaction, at most once per
// backgroundLogEvery, with the count of those not logged since.
func (s *Store) backgroundError(err error) {
	s.bgErrors.Add(1)
	now := time.Now().UnixNano()
	last := s.bgLogged.Load()
	if now-last < int64(backgroundLogEvery) || !s.bgLogged.CompareAndSwap(last, now) {
		return
	}
	s.log.Error("data dir: a background flush or compaction failed; pebble retries it", "err", err, "data_dir", s.dir,
		"background_errors", s.bgErrors.Load())
}

// freeSpace is statfs(2)'s space available to an unprivileged user, in bytes.
func freeSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("store: statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// byteSize prints n in the largest binary unit that keeps it at 1 or more.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 3; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGT"[exp])
}

// corruptAdvice is the way out of a corrupted file.
const corruptAdvice = "stop the sidecar, move the data dir aside and start it again: the node then re-syncs its state from its peers"

// CorruptError is a file of the data dir that failed its checksum or does not parse.
type CorruptError struct {
	Path string // the file, when pebble named it
	Err  error  // pebble's error
}

func (e *CorruptError) Error() string {
	msg, _, _ := strings.Cut(e.Err.Error(), "\n") // pebble's error carries a second line for its own tools
	file := e.Path
	if file == "" {
		file = "a file"
	}
	return fmt.Sprintf("%s is corrupted (%s): %s", file, msg, corruptAdvice)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// corrupted returns err as a *CorruptError, naming the file, if pebble says it is a
// corruption; otherwise err.
func (s *Store) corrupted(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) {
		return err
	}
	var path string
	if p := s.corruptPath.Load(); p != nil {
		path = *p
	}
	return &CorruptError{Path: path, Err: err}
}

// Writable returns nil if a write may succeed now, else why not (ErrDiskFull,
// ErrFailed): it checks the floor, and reopens a read-only or failed store
// read-write if there is room, as a write would, without writing anything. The node
// asks it at start and while its commits fail, so that its readiness says why.
func (s *Store) Writable() error {
	if err := s.beginWrite(); err != nil {
		return err
	}
	s.mu.RUnlock()
	return nil
}
