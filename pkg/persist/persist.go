package persist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
)

// Store is the durable copy of the state table that --data-dir keeps: *store.Store,
// or a fake in tests.
type Store interface {
	// Load calls fn with every record; Key and Raw are valid until fn returns.
	Load(fn func(store.Record) error) error
	// Commit writes puts and removes deletes, atomically and durably (fsynced).
	Commit(puts []store.Record, deletes [][]byte) error
	// Clock is the highest Version ever committed or RaiseClock'd.
	Clock() uint64
	// RaiseClock saves v as the clock's mark if it is higher, durably.
	RaiseClock(v uint64) error
	// Writable is nil if a commit may succeed now, else why not (a full disk:
	// store.ErrDiskFull; a failed store: store.ErrFailed). It writes nothing.
	Writable() error
}

// ErrStopped: the persister has stopped (Close) short of the revision waited for.
var ErrStopped = errors.New("persist: stopped")

// CommitError is a failed commit to the Store: the changes it held are applied in
// memory (and, in the node, queued for the peers) but not on disk. Wait returns it to
// the waiters of the revisions it covered; the persister tries the same changes again
// every Config.Retry.
type CommitError struct {
	// Cause is the Store's error (store.ErrDiskFull, store.ErrFailed, ...) or the
	// state table's.
	Cause error
}

func (e *CommitError) Error() string { return "persist: commit failed: " + e.Cause.Error() }

func (e *CommitError) Unwrap() error { return e.Cause }

// Config configures a Persister.
type Config struct {
	// Store receives every change of the table. Required.
	Store Store
	// Logger gets the commit failures and recoveries. Required.
	Logger *slog.Logger
	// Retry is the pause after a failed commit (a full disk, an I/O error): the same
	// changes are tried again, and waiting Submits get the error meanwhile. 1s: a
	// disk that fills up is not freed within milliseconds, and a retry costs a
	// Writable check and maybe a failed fsync.
	Retry time.Duration
}

// DefaultConfig returns a Config with the defaults; the caller sets Store and Logger.
func DefaultConfig() Config { return Config{Retry: time.Second} }

func (c Config) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, configerr.New("persist.Config.Store", "must be set: the store opened for the data dir"))
	}
	if c.Logger == nil {
		errs = append(errs, configerr.New("persist.Config.Logger", "must be set"))
	}
	if c.Retry <= 0 {
		errs = append(errs, configerr.New("persist.Config.Retry", "must be > 0, got %v (DefaultConfig has 1s)", c.Retry))
	}
	return errors.Join(errs...)
}

// Bounds of one commit: a persister far behind writes in steps, each durable on its
// own, rather than one huge batch.
const (
	maxEntries = 16 << 10
	maxBytes   = 8 << 20
)

// Persister writes the state table's changes to the Store. One goroutine follows the
// table's revision log and commits everything new since its last commit in one
// batch, with one fsync: writers that arrive while a commit syncs share the next one
// (group commit). Submit waits, with Wait, until its revisions are durable.
//
// Tombstones the table forgets (state.Config.Collected, set to Forgotten) are deleted
// from the store in the next commit, unless the key has been written again by then.
//
// Its life: New, Forgotten as the table's Collected hook, state.New, Load (fills the
// table, which the persister then follows), Start, then Wait, Fault, Stats from any
// goroutine, and Close after every writer of the table has stopped.
type Persister struct {
	cfg   Config
	store Store
	log   *slog.Logger
	// table is set by Load, before Start; never changed after.
	table *state.Table

	kick    chan struct{} // buffered 1: a tombstone was collected
	stop    chan struct{} // closed by Close: flush what is left and exit
	done    chan struct{} // closed when run has exited
	started atomic.Bool   // set by Start, before run exists; Close waits for run only then
	closed  sync.Once

	mu sync.Mutex
	// durable is the revision up to which every change is on disk. Set by Start,
	// then only run raises it. Invariant: durable <= table.Revision().
	durable uint64
	// advanced is closed and replaced whenever durable rises or err changes.
	advanced chan struct{}
	// err is the last commit's error, nil once a commit succeeds again; it covered
	// the revisions up to errUpTo. cause is the Store's error it wraps (err.Cause).
	// Invariant: err == nil iff cause == nil, and then errUpTo == 0.
	err     *CommitError
	errUpTo uint64
	cause   error
	// faulted is closed and replaced whenever err turns from nil to set or back:
	// the node's readiness changes then.
	faulted chan struct{}
	// collected are the keys of tombstones forgotten since the last commit (copies).
	collected [][]byte
	// stats
	commits, records, deletes, failures uint64
	lastCommit                          time.Duration
	// failures by kind: the disk below the floor, the store failed (I/O).
	diskFull, ioErrors uint64
}

// New returns a persister of cfg.Store; it starts nothing.
func New(cfg Config) (*Persister, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Persister{cfg: cfg, store: cfg.Store, log: cfg.Logger,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		advanced: make(chan struct{}), faulted: make(chan struct{})}, nil
}

// Forgotten is state.Config.Collected: the table forgot the tombstone of key, so the
// next commit deletes it from the store. It runs under the table's lock.
func (p *Persister) Forgotten(key []byte) {
	p.mu.Lock()
	p.collected = append(p.collected, append([]byte(nil), key...))
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Start starts the goroutine that commits the table's changes, once Load has filled
// the table: everything loaded is on disk already. Close stops it.
func (p *Persister) Start() {
	p.mu.Lock()
	p.durable = p.table.Revision()
	p.mu.Unlock()
	p.started.Store(true)
	go p.run()
}

// run commits the table's changes after the durable revision until Close, then
// commits what is left and returns.
func (p *Persister) run() {
	defer close(p.done)
	scan := state.Scan{After: p.Durable(), Deletions: true, PastCompaction: true,
		MaxEntries: maxEntries, MaxBytes: maxBytes}
	var buf []state.Entry
	var recs []store.Record
	if err := p.store.Writable(); err != nil { // a full disk at start: not ready, and why
		p.failed(err, p.table.Revision())
	}
	for {
		var retry <-chan time.Time
		if err := p.flush(&scan, &buf, &recs); err != nil {
			retry = time.After(p.cfg.Retry)
		}
		select {
		case <-p.stop:
			if err := p.flush(&scan, &buf, &recs); err != nil {
				p.log.Error("data dir: the last changes could not be saved at shutdown; anti-entropy brings them back from the peers after the restart",
					"err", err, "durable_revision", p.Durable(), "latest_revision", p.table.Revision())
			}
			return
		case <-retry:
		case <-p.kick:
		case <-p.table.Changed(scan.After):
		}
	}
}

// flush commits every change after scan.After, in steps. On an error the scan is
// put back, so that the same changes are tried again.
func (p *Persister) flush(scan *state.Scan, buf *[]state.Entry, recs *[]store.Record) error {
	if p.faultErr() != nil {
		// Still failing? Asked even with nothing to commit, so that the fault is
		// not taken for over before the disk can take a commit.
		if err := p.store.Writable(); err != nil {
			return p.failed(err, p.table.Revision())
		}
	}
	for {
		before := scan.After
		entries, err := p.table.Next(scan, (*buf)[:0])
		if err != nil {
			return p.failed(fmt.Errorf("reading the state table: %w", err), scan.After)
		}
		*buf = entries
		p.mu.Lock()
		deletes := p.collected
		p.collected = nil
		p.mu.Unlock()
		if len(entries) == 0 && len(deletes) == 0 {
			p.advance(scan.After, 0, 0, 0) // dead slots only, or nothing
			return nil
		}
		*recs = (*recs)[:0]
		for i := range entries {
			e := &entries[i]
			*recs = append(*recs, store.Record{Key: e.Key, Raw: e.Raw, Version: e.Stamp.Version,
				Origin: e.Stamp.Origin, Submitted: e.Submitted, Deleted: e.Deleted})
		}
		// A forgotten key written again since is not deleted: its new entry is in
		// this commit or a later one. Checked after the entries were read.
		kept := deletes[:0]
		for _, k := range deletes {
			if _, ok := p.table.Get(k); !ok {
				kept = append(kept, k)
			}
		}
		start := time.Now()
		if err := p.store.Commit(*recs, kept); err != nil {
			upTo := scan.After
			scan.After = before
			p.mu.Lock()
			p.collected = append(deletes, p.collected...)
			p.mu.Unlock()
			return p.failed(err, upTo)
		}
		p.advance(scan.After, len(*recs), len(kept), time.Since(start))
		clear(*recs) // drop the references to the table's records
		if p.table.Done(scan) {
			return nil
		}
	}
}

// failed records a commit's error; the waiters for revisions up to upTo, the last
// one it tried to write, get it.
func (p *Persister) failed(cause error, upTo uint64) error {
	err := &CommitError{Cause: cause}
	p.mu.Lock()
	first := p.err == nil
	p.err, p.errUpTo, p.cause = err, max(p.errUpTo, upTo), cause
	p.failures++
	switch {
	case errors.Is(cause, store.ErrDiskFull):
		p.diskFull++
	case errors.Is(cause, store.ErrFailed):
		p.ioErrors++
	}
	close(p.advanced)
	p.advanced = make(chan struct{})
	if first {
		close(p.faulted)
		p.faulted = make(chan struct{})
	}
	p.mu.Unlock()
	if first {
		p.log.Error("data dir: commit failed; retrying every second, Submits answer UNAVAILABLE meanwhile", "err", err)
	}
	return err
}

func (p *Persister) faultErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return nil
	}
	return p.err
}

// Fault is the node's readiness while commits fail: false and why ("disk full: …"),
// or true when they do not.
func (p *Persister) Fault() (ok bool, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.err == nil:
		return true, ""
	case errors.Is(p.cause, store.ErrDiskFull):
		return false, "disk full: " + strings.TrimPrefix(p.cause.Error(), store.ErrDiskFull.Error()+": ")
	default:
		return false, "data dir failing: " + p.cause.Error()
	}
}

// FaultChanged is closed when commits start or stop failing: Fault changes then.
// Ask for it again after each close.
func (p *Persister) FaultChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faulted
}

func (p *Persister) advance(rev uint64, records, deletes int, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if records+deletes > 0 {
		p.commits++
		p.records += uint64(records)
		p.deletes += uint64(deletes)
		p.lastCommit = took
	}
	if rev <= p.durable && p.err == nil {
		return
	}
	if p.err != nil {
		p.log.Info("data dir: commits succeed again")
		close(p.faulted)
		p.faulted = make(chan struct{})
	}
	p.durable, p.err, p.errUpTo, p.cause = max(p.durable, rev), nil, 0, nil
	close(p.advanced)
	p.advanced = make(chan struct{})
}

// Durable is the revision up to which every change of the table is on disk.
func (p *Persister) Durable() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.durable
}

// Wait returns once every change up to rev is on disk, or with the commit's error (a
// *CommitError), or ctx's, or ErrStopped once the persister has stopped short of rev.
// Waiters that arrive while a commit syncs share the next one.
func (p *Persister) Wait(ctx context.Context, rev uint64) error {
	for {
		p.mu.Lock()
		durable, err, errUpTo, ch := p.durable, p.err, p.errUpTo, p.advanced
		p.mu.Unlock()
		switch {
		case durable >= rev:
			return nil
		case err != nil && rev <= errUpTo: // a commit of rev failed
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			if p.Durable() >= rev {
				return nil
			}
			return ErrStopped
		}
	}
}

// Close commits what is left and stops run. Call it after every writer of the table
// has stopped. Idempotent; without Start it does nothing.
func (p *Persister) Close() {
	p.closed.Do(func() {
		if !p.started.Load() {
			return
		}
		close(p.stop)
		<-p.done
	})
}

// Stats are the persister's counters, for GetStatus and the metrics.
type Stats struct {
	Commits, Records, Deletes, Failures uint64
	DiskFull, IOErrors                  uint64 // of Failures
	Full                                bool   // failing now, the disk below the floor
	LastCommit                          time.Duration
	Durable, Latest                     uint64
	Err                                 string
}

// Stats returns the counters.
func (p *Persister) Stats() Stats {
	latest := p.table.Revision()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Commits: p.commits, Records: p.records, Deletes: p.deletes, Failures: p.failures,
		DiskFull: p.diskFull, IOErrors: p.ioErrors, Full: p.err != nil && errors.Is(p.cause, store.ErrDiskFull),
		LastCommit: p.lastCommit, Durable: p.durable, Latest: latest}
	if p.err != nil {
		s.Err = p.err.Error()
	}
	return s
}

// Loaded is what Load found in the store.
type Loaded struct {
	// Keys were put in the table; Expired were tombstones past the table's
	// TombstoneTTL (forgotten on disk too, in the first commit); Refused did not fit
	// the table's bounds (not loaded).
	Keys, Expired, Refused int
	// Clock is the store's clock: the highest version it ever committed or raised.
	Clock uint64
}

// Load fills the empty table t from the Store, every record as a write of t's own
// node (it was in this table before: the whole bound), at now; the persister then
// follows t. Call it once, before Start and before any other writer of t. The
// caller moves its clock past Loaded.Clock.
func (p *Persister) Load(t *state.Table, now time.Time) (Loaded, error) {
	p.table = t
	var l Loaded
	err := p.store.Load(func(r store.Record) error {
		off := wire.TaskIDOffset(r.Raw)
		if off < 0 || off+len(r.Key) > len(r.Raw) || string(r.Raw[off:off+len(r.Key)]) != string(r.Key) {
			return fmt.Errorf("record %q: its event does not decode, or names another task_id", r.Key)
		}
		w := state.Write{Key: r.Raw[off : off+len(r.Key)], KeyOffset: off, Raw: r.Raw,
			Stamp: state.Stamp{Version: r.Version, Origin: r.Origin}, Submitted: r.Submitted, Deleted: r.Deleted,
			Own: true}
		switch t.Put(&w, now).Outcome {
		case state.Applied:
			l.Keys++
		case state.Stale: // a tombstone past its ttl: forget it on disk too
			l.Expired++
			p.Forgotten(r.Key)
		default:
			l.Refused++
		}
		return nil
	})
	var corrupt *store.CorruptError
	switch {
	case errors.As(err, &corrupt): // says the way out itself
		return l, fmt.Errorf("--data-dir: loading the state: %w", err)
	case err != nil:
		return l, fmt.Errorf("--data-dir: loading the state: %w (to start empty instead, move the data dir aside: anti-entropy refills it from the peers)", err)
	}
	l.Clock = p.store.Clock()
	return l, nil
}
