package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// ErrClosed is returned by every call on a Store after Close.
var ErrClosed = errors.New("store: closed")

// layout is the on-disk layout this build reads and writes (doc.go), saved under
// metaLayout when a data dir is created. A later layout bumps it; Open refuses one it
// does not know rather than misread it.
const layout = 1

// Key prefixes and the names of the meta keys (doc.go).
const (
	prefixRecord = 'k' // + the task_id
	prefixMeta   = "m" // + a name
	metaLayout   = prefixMeta + "layout"
	metaNodeID   = prefixMeta + "node"
	metaClock    = prefixMeta + "clock"
	// metaTransport is the transport's position (SetTransportPosition).
	metaTransport = prefixMeta + "transport"
	lockName      = "fanout.lock"
)

// Record is one key's latest state as kept on disk.
type Record struct {
	Key       []byte // the task_id, 1..MaxKeyBytes bytes
	Raw       []byte // the encoded fanout.v1.Event, 0..MaxRawBytes bytes
	Version   uint64
	Origin    string // the node that wrote the version, 0..MaxOriginBytes bytes
	Submitted int64  // unix nanos at the origin
	Deleted   bool   // a tombstone
}

// Config configures a Store. It is copied by Open.
type Config struct {
	// Logger gets the store's own logs: recovery at Open, background errors.
	// Default: discard.
	Logger *slog.Logger

	// MinFreeBytes is the free-space floor of the data dir's file system: a write
	// that finds less free (statfs) is refused with ErrDiskFull before pebble sees
	// it, and the store opens read-only below it (disk.go, doc.go "Disk faults").
	// 0: no floor. Default: DefaultMinFreeBytes.
	MinFreeBytes int64

	// fs is pebble's file system: nil is the OS's. Tests set it to slow the log's
	// syncs down (store_test.go) or to fail writes (disk_test.go).
	fs vfs.FS
	// statfs returns the free bytes of dir's file system: nil is freeSpace. Tests
	// set it to fill the disk.
	statfs func(dir string) (uint64, error)
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Logger: slog.New(slog.DiscardHandler), MinFreeBytes: DefaultMinFreeBytes}
}

func (c *Config) validate() error {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MinFreeBytes < 0 {
		return fmt.Errorf("store: Config.MinFreeBytes: %d, must be at least 0", c.MinFreeBytes)
	}
	if c.statfs == nil {
		c.statfs = freeSpace
	}
	return nil
}

// Stats are a Store's counters since Open.
type Stats struct {
	Commits    uint64        // Commit calls that wrote something and returned nil
	Records    uint64        // their puts and deletes
	Syncs      uint64        // fdatasyncs of the log: the Commits shared them
	LastCommit time.Duration // how long the latest such Commit took, its sync included
	DiskBytes  uint64        // the store's files
	// DiskFull counts writes refused below the free-space floor (ErrDiskFull).
	DiskFull uint64
	// Full: the last write found the file system below the floor. FreeBytes: the
	// free space it found (0 before any write, or with no floor).
	Full      bool
	FreeBytes uint64
	// Failed: pebble reported an error it cannot go on from (ErrFailed), and the
	// store has not reopened since. Fatal counts such errors.
	Failed bool
	Fatal  uint64
}

// Store is the durable copy of a node's state: its records, node id and clock
// high-water mark, in one data dir. Its methods are safe for concurrent use.
type Store struct {
	dir    string
	log    *slog.Logger
	db     *pebble.DB
	lock   io.Closer            // the data dir's fanout.lock, held until Close
	fsyncs prometheus.Histogram // pebble's log sync latencies: its count is Syncs

	fs      vfs.FS
	minFree int64
	statfs  func(dir string) (uint64, error)

	// mu is held for reading by every call that uses db and for writing by Close,
	// which so waits for the calls in flight, and by reopen, which replaces db.
	// closed is set under mu (write).
	mu     sync.RWMutex
	closed bool
	// readOnly: db was opened read-only, the disk being below the floor at Open.
	// Written under mu (write); the first write that finds room reopens db.
	readOnly atomic.Bool
	// failed is set once, by fail, when pebble reported an error it cannot go on
	// from: every later write returns it.
	failed atomic.Pointer[error]
	// corruptPath is the path of the last file pebble found corrupted.
	corruptPath atomic.Pointer[string]
	// full and freeBytes are what the last check of the floor found; diskFull counts
	// the writes it refused.
	full      atomic.Bool
	freeBytes atomic.Uint64
	diskFull  atomic.Uint64
	fatals    atomic.Uint64 // the failures fail recorded
	// bgErrors counts pebble's background errors; bgLogged is when one was last
	// logged (unix nanos).
	bgErrors, bgLogged atomic.Int64

	// clock is the high-water mark read at Open, raised (atomic max) by each Commit
	// after its sync. Invariant: clock <= the mark on disk; it is lower only while a
	// Commit is between its sync and its raise.
	clock atomic.Uint64

	nodeMu sync.Mutex // guards nodeID
	nodeID string

	commits, records, lastCommitNs atomic.Uint64
}

// Open opens the store in dir, creating dir and an empty store if there is none. It
// holds dir's lock until Close, so a second Open of dir, in this process or another,
// fails until then.
func Open(dir string, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: creating data dir: %w", err)
	}
	if err := checkForeign(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: dir, log: cfg.Logger, lock: lock, fs: cfg.fs, minFree: cfg.MinFreeBytes, statfs: cfg.statfs}
	if s.fs == nil {
		// Given, so that pebble does not wrap it in its disk-health checker, whose
		// goroutine a failed Open leaves running (one per retry of a reopen); its
		// slow-disk event is a no-op here anyway.
		s.fs = vfs.Default
	}
	if err := s.openAtStart(); err != nil {
		lock.Close()
		return nil, err
	}
	return s, nil
}

// openAtStart opens pebble read-write, or read-only when the disk is below the floor
// (pebble writes at Open: a new log, a new MANIFEST), so that the node can load its
// state and serve while the disk is full; the first write that finds room reopens it
// read-write. A new store cannot be made read-only: that is an error.
func (s *Store) openAtStart() (err error) {
	defer s.guard(&err)
	full := s.writable()
	if full == nil {
		return s.open(false)
	}
	if err := s.open(true); err != nil {
		if errors.Is(err, pebble.ErrDBDoesNotExist) {
			return fmt.Errorf("store: data dir %s is new and its disk is full: %w", s.dir, full)
		}
		return err
	}
	s.log.Warn("data dir opened read-only: its disk is below the free-space floor; writes are refused until there is room, then it reopens by itself",
		"err", full, "data_dir", s.dir)
	return nil
}

// reopen reopens a read-only store read-write, once a write finds room on the disk.
// It holds mu for writing: the calls in flight end first.
func (s *Store) reopen() (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.readOnly.Load() {
		return nil
	}
	defer s.guard(&err)
	if err := s.db.Close(); err != nil {
		return s.fail(fmt.Sprintf("closing the read-only store: %v", err))
	}
	if err := s.open(false); err != nil {
		// Back to read-only, so that the node's reads keep working.
		if rerr := s.open(true); rerr != nil {
			return s.fail(fmt.Sprintf("reopening read-write: %v; and read-only: %v", err, rerr))
		}
		return err
	}
	s.log.Info("data dir reopened read-write: the disk has room again", "data_dir", s.dir)
	return nil
}

// recover reopens a failed store: pebble's Close after the failure returns the
// error and releases the files, and Open replays the log, which holds every batch
// that was acknowledged. It is tried by the next write (the node retries a failed
// commit every second), only when no call is in flight: a call stuck behind the
// failed batch in pebble's commit pipeline keeps the store failed until the restart,
// and no caller ever waits for it here.
func (s *Store) recover() (err error) {
	if !s.mu.TryLock() {
		return *s.failed.Load()
	}
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	failed := *s.failed.Load()
	defer s.guard(&err)
	if s.db != nil {
		s.closeDB() // returns the failure again
		s.db = nil
	}
	if err := s.checkRoom(max(s.minFree, reopenMinFree)); err != nil {
		return fmt.Errorf("%w; %w", err, failed)
	}
	if err := s.open(false); err != nil {
		return fmt.Errorf("%w; reopening: %w", failed, err)
	}
	s.failed.Store(nil)
	s.log.Info("data dir reopened after the failure: writes go on", "data_dir", s.dir, "was", failed)
	return nil
}

// beginWrite checks that a write may go to pebble (writable), reopens a read-only
// store read-write first if so, then takes mu for reading: the caller must call
// s.mu.RUnlock when it returns nil.
func (s *Store) beginWrite() error {
	if s.failed.Load() != nil {
		if err := s.recover(); err != nil {
			return err
		}
	}
	if err := s.writable(); err != nil {
		return err
	}
	if s.readOnly.Load() {
		if err := s.reopen(); err != nil {
			return err
		}
	}
	return s.use()
}

// checkForeign refuses a directory that holds files but is not a data dir (it has no
// lock file, which Open creates before anything else): a mistyped --data-dir must not
// fill someone's directory with pebble's files. lost+found, at the root of a freshly
// made file system (a mounted volume), does not count.
func checkForeign(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store: data dir %s: %w", dir, err)
	}
	var other string
	for _, e := range entries {
		switch e.Name() {
		case lockName:
			return nil
		case "lost+found":
		default:
			other = e.Name()
		}
	}
	if other != "" {
		return fmt.Errorf("store: data dir %s holds %s and other files but no %s: it is not a fanout data dir; give an empty or new directory", dir, other, lockName)
	}
	return nil
}

// lockDir takes dir's lock: an fcntl lock on dir/fanout.lock, which the OS drops when
// the process dies, and which pebble's vfs also records per process, so that a second
// lock of the same path in this process fails too (fcntl alone would grant it). The
// path is made absolute and free of symlinks first, so that two spellings of one dir
// are one lock. pebble's own LOCK is taken later, under it.
func lockDir(dir string) (io.Closer, error) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return nil, fmt.Errorf("store: data dir %s: %w", dir, err)
	}
	lock, err := vfs.Default.Lock(filepath.Join(abs, lockName))
	if err != nil {
		return nil, fmt.Errorf("store: data dir %s is in use by another sidecar (%v); "+
			"stop that one, or give each sidecar its own --data-dir", abs, err)
	}
	return lock, nil
}

// open opens pebble in s.dir with the store's options: pebble's defaults (a 4 MiB
// memtable, an 8 MiB block cache, no WAL failover) but for the logger, the events
// (logged, never fatal) and the clock's merge operator.
func (s *Store) open(readOnly bool) error {
	db, err := pebble.Open(s.dir, &pebble.Options{
		FS:            s.fs,
		Logger:        pebbleLogger{s.log},
		Merger:        clockMerger(),
		ReadOnly:      readOnly,
		EventListener: s.events(),
	})
	if err != nil {
		err = s.corrupted(err)
		var corrupt *CorruptError
		var errno syscall.Errno
		if !errors.As(err, &corrupt) && !errors.As(err, &errno) && !errors.Is(err, pebble.ErrDBDoesNotExist) {
			// A file missing, or of the wrong size: pebble does not call it corruption.
			return fmt.Errorf("store: opening %s: %w (if a file of the data dir is missing or damaged: %s)", s.dir, err, corruptAdvice)
		}
		return fmt.Errorf("store: opening %s: %w", s.dir, err)
	}
	s.db = db
	s.readOnly.Store(readOnly)
	s.fsyncs = db.Metrics().LogWriter.FsyncLatency
	if err := s.readMeta(); err != nil {
		db.Close()
		return fmt.Errorf("store: %s: %w", s.dir, s.corrupted(err))
	}
	return nil
}

// events are pebble's event hooks: a background error (a flush or a compaction that
// failed, which pebble retries) and a corrupted file are logged. pebble's default for
// a corrupted file is Fatalf; here the read that found it fails instead, and says so.
func (s *Store) events() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: s.backgroundError,
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			s.corruptPath.Store(&info.Path)
			s.log.Error("data dir: a corrupted file", "file", info.Path, "err", info.Details, "advice", corruptAdvice)
		},
	}
}

// readMeta checks the layout (saving it in a new store) and reads the node id and
// the clock.
func (s *Store) readMeta() error {
	v, found, err := s.get(metaLayout)
	switch {
	case err != nil:
		return err
	case !found && s.readOnly.Load():
		return errors.New("no layout saved: the store was never finished; move the data dir aside and start again")
	case !found:
		if err := s.db.Set([]byte(metaLayout), []byte{layout}, pebble.Sync); err != nil {
			return fmt.Errorf("saving the layout: %w", err)
		}
	case len(v) != 1 || v[0] != layout:
		return fmt.Errorf("on-disk layout %s, this build reads only layout %d: "+
			"the data dir was written by another (newer?) sidecar; run that one, or start with an empty --data-dir",
			layoutName(v), layout)
	}
	v, _, err = s.get(metaNodeID)
	if err != nil {
		return err
	}
	s.nodeID = string(v)
	v, found, err = s.get(metaClock)
	if err != nil || !found {
		return err
	}
	c, err := decodeClock(v)
	s.clock.Store(c)
	return err
}

// layoutName prints a saved layout value.
func layoutName(v []byte) string {
	if len(v) == 1 {
		return fmt.Sprint(v[0])
	}
	return fmt.Sprintf("%q (not one byte)", v)
}

// get returns a copy of key's value and whether it was found.
func (s *Store) get(key string) ([]byte, bool, error) {
	v, closer, err := s.db.Get([]byte(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// use takes mu for reading if the store is open: the caller must call s.mu.RUnlock.
func (s *Store) use() error {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// NodeID is the node id saved by SetNodeID, "" when none was.
func (s *Store) NodeID() string {
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	return s.nodeID
}

// SetNodeID saves id as the node id, durably (synced when it returns nil).
func (s *Store) SetNodeID(id string) (err error) {
	if n := len(id); n == 0 || n > MaxOriginBytes {
		return fmt.Errorf("store: node id: %d bytes, must be 1..%d", n, MaxOriginBytes)
	}
	if err := s.beginWrite(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer s.guard(&err)
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	if err := s.db.Set([]byte(metaNodeID), []byte(id), pebble.Sync); err != nil {
		return fmt.Errorf("store: saving the node id: %w", err)
	}
	s.nodeID = id
	return nil
}

// MaxTransportPositionBytes bounds what SetTransportPosition takes: a position is
// a few numbers and a stream's name, not data.
const MaxTransportPositionBytes = 4 << 10

// TransportPosition is the value SetTransportPosition saved last, nil if none.
func (s *Store) TransportPosition() ([]byte, error) {
	if err := s.use(); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	v, _, err := s.get(metaTransport)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return v, nil
}

// SetTransportPosition saves v, the transport's position in what it reads and
// writes (the JetStream transport: its stream, the sequence its feed applied, its
// outbox's mark), opaque to the store, at most MaxTransportPositionBytes, durably
// (synced when it returns nil: a node that writes nothing itself would otherwise
// keep it in pebble's buffer, and lose it to kill -9). The transport saves it about
// once a second while it changes.
func (s *Store) SetTransportPosition(v []byte) (err error) {
	if len(v) > MaxTransportPositionBytes {
		return fmt.Errorf("store: transport position: %d bytes, at most %d", len(v), MaxTransportPositionBytes)
	}
	if err := s.beginWrite(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer s.guard(&err)
	if err := s.db.Set([]byte(metaTransport), v, pebble.Sync); err != nil {
		return fmt.Errorf("store: saving the transport's position: %w", err)
	}
	return nil
}

// Clock is the clock's high-water mark: the highest Version of any record put by a
// Commit that has returned nil, in this process or before it, 0 if none. It is on
// disk: a restarted node reads it back, and must not write a version at or below it.
func (s *Store) Clock() uint64 { return s.clock.Load() }

// RaiseClock raises the clock's high-water mark to v (never lowers it), durably:
// the node leases versions ahead of use with it, so that a restart starts above every
// version it handed out, committed or not.
func (s *Store) RaiseClock(v uint64) (err error) {
	if v <= s.clock.Load() {
		return nil
	}
	if err := s.beginWrite(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer s.guard(&err)
	if err := s.db.Merge([]byte(metaClock), encodeClock(v), pebble.Sync); err != nil {
		return fmt.Errorf("store: saving the clock: %w", err)
	}
	s.raiseClock(v)
	return nil
}

// Load calls fn with every record, in key order (bytewise), and stops at fn's first
// error, which it returns. r.Key and r.Raw alias the store's memory and are valid only
// until fn returns: fn copies what it keeps (r.Origin is a string of its own, one per
// distinct origin). A value that does not decode stops Load with an error that names
// its key. fn must not call the Store: Load holds it open for reading, and a Close
// waiting behind fn would deadlock a nested call.
func (s *Store) Load(fn func(r Record) error) (err error) {
	if err := s.use(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer s.guard(&err)
	it, err := s.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixRecord},
		UpperBound: []byte{prefixRecord + 1},
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	err = s.load(it, fn)
	if cerr := it.Close(); err == nil { // the iterator's error again, if it had one
		err = cerr
	}
	return err
}

func (s *Store) load(it *pebble.Iterator, fn func(r Record) error) error {
	origins := map[string]string{} // each origin is one string, however many records
	for ok := it.First(); ok; ok = it.Next() {
		key := it.Key()[1:]
		raw, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("store: record %q: %w", key, s.corrupted(err))
		}
		v, err := decodeValue(raw)
		if err != nil {
			return fmt.Errorf("store: record %q: %w", key, err)
		}
		origin, ok := origins[string(v.origin)]
		if !ok {
			origin = string(v.origin)
			origins[origin] = origin
		}
		r := Record{Key: key, Raw: v.raw, Version: v.version, Origin: origin,
			Submitted: v.submitted, Deleted: v.deleted}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: reading the records: %w", s.corrupted(err))
	}
	return nil
}

// Commit writes puts, then removes deletes (a key in both ends up removed; a key put
// twice keeps the later), in one atomic batch that also raises the clock's high-water
// mark to the highest put Version. The batch is on disk (in the fdatasynced WAL) when
// Commit returns nil, and after a crash either all of it is there or none; concurrent
// Commits share syncs (group commit, doc.go). A bound broken by any record fails the
// whole Commit before anything is written, with an error naming the field. Commit
// keeps no reference to its arguments. Below the free-space floor it writes nothing
// and returns ErrDiskFull; after a fatal pebble error, ErrFailed (doc.go).
func (s *Store) Commit(puts []Record, deletes [][]byte) (err error) {
	if err := validate(puts, deletes); err != nil {
		return err
	}
	if len(puts) == 0 && len(deletes) == 0 {
		return nil
	}
	if err := s.beginWrite(); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	defer s.guard(&err)
	start := time.Now()
	b := s.db.NewBatch()
	defer b.Close()
	top, err := fill(b, puts, deletes)
	if err == nil && top > s.clock.Load() {
		// Skipped when a finished Commit already saved a higher mark.
		err = b.Merge([]byte(metaClock), encodeClock(top), nil)
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	s.raiseClock(top)
	s.commits.Add(1)
	s.records.Add(uint64(len(puts) + len(deletes)))
	s.lastCommitNs.Store(uint64(time.Since(start)))
	return nil
}

// fill adds puts and deletes to b, and returns the highest put Version.
func fill(b *pebble.Batch, puts []Record, deletes [][]byte) (uint64, error) {
	var top uint64
	var key, val []byte
	for i := range puts {
		r := &puts[i]
		key = append(append(key[:0], prefixRecord), r.Key...)
		val = appendValue(val[:0], r)
		if err := b.Set(key, val, nil); err != nil { // Set copies key and val
			return 0, err
		}
		top = max(top, r.Version)
	}
	for _, d := range deletes {
		key = append(append(key[:0], prefixRecord), d...)
		if err := b.Delete(key, nil); err != nil {
			return 0, err
		}
	}
	return top, nil
}

func (s *Store) raiseClock(v uint64) {
	for {
		c := s.clock.Load()
		if v <= c || s.clock.CompareAndSwap(c, v) {
			return
		}
	}
}

// validate checks every bound of a Commit's arguments and names the first field past
// one.
func validate(puts []Record, deletes [][]byte) error {
	for i := range puts {
		r := &puts[i]
		if err := checkLens(len(r.Key), len(r.Origin), len(r.Raw)); err != nil {
			return fmt.Errorf("store: puts[%d].%w", i, err)
		}
	}
	for i, d := range deletes {
		if n := len(d); n == 0 || n > MaxKeyBytes {
			return fmt.Errorf("store: deletes[%d]: %d bytes, must be 1..%d", i, n, MaxKeyBytes)
		}
	}
	return nil
}

// checkLens checks a record's lengths against the bounds, and names the field past
// one.
func checkLens(key, origin, raw int) error {
	switch {
	case key == 0 || key > MaxKeyBytes:
		return fmt.Errorf("Key: %d bytes, must be 1..%d", key, MaxKeyBytes)
	case origin > MaxOriginBytes:
		return fmt.Errorf("Origin: %d bytes, must be at most %d", origin, MaxOriginBytes)
	case raw > MaxRawBytes:
		return fmt.Errorf("Raw: %d bytes, must be at most %d", raw, MaxRawBytes)
	}
	return nil
}

// Stats returns the counters since Open. It is not free (it reads pebble's metrics):
// call it at a scrape, not per commit.
func (s *Store) Stats() Stats {
	st := Stats{
		Commits:    s.commits.Load(),
		Records:    s.records.Load(),
		LastCommit: time.Duration(s.lastCommitNs.Load()),
		DiskFull:   s.diskFull.Load(),
		Full:       s.full.Load(),
		FreeBytes:  s.freeBytes.Load(),
		Failed:     s.failed.Load() != nil,
		Fatal:      s.fatals.Load(),
	}
	if s.use() != nil {
		return st
	}
	defer s.mu.RUnlock()
	if s.db == nil {
		return st
	}
	var m dto.Metric
	if s.fsyncs != nil && s.fsyncs.Write(&m) == nil {
		st.Syncs = m.GetHistogram().GetSampleCount()
	}
	st.DiskBytes = s.db.Metrics().DiskSpaceUsage()
	return st
}

// closeDB closes pebble; after a failure, a Fatalf of its Close is an error too.
func (s *Store) closeDB() (err error) {
	defer s.guard(&err)
	return s.db.Close()
}

// Close waits for the calls in flight, closes the store and releases the data dir.
// It is idempotent: a second Close returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.db != nil { // nil after a failed recover
		err = s.closeDB()
	}
	if lerr := s.lock.Close(); lerr != nil {
		err = errors.Join(err, fmt.Errorf("store: releasing the lock of %s: %w", s.dir, lerr))
	}
	return err
}
