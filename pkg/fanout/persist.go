package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
)

// Store is the durable copy of the state table that --data-dir keeps: pkg/store.
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

// ErrNotDurable wraps a failed commit to the data dir: the events are applied in
// memory and queued for the peers, but not on this node's disk.
var ErrNotDurable = errors.New("fanout: not on disk")

// Bounds of one commit: a persister far behind writes in steps, each durable on its
// own, rather than one huge batch.
const (
	persistMaxEntries = 16 << 10
	persistMaxBytes   = 8 << 20
	// persistRetry is the pause after a failed commit (a full disk, an I/O error):
	// the same changes are tried again, and waiting Submits get the error meanwhile.
	persistRetry = time.Second
)

// persister writes the state table's changes to the Store. One goroutine follows the
// table's revision log and commits everything new since its last commit in one
// batch, with one fsync: writers that arrive while a commit syncs share the next one
// (group commit). Submit waits, with wait, until its revisions are durable.
//
// Tombstones the table forgets (state.Config.Collected) are deleted from the store in
// the next commit, unless the key has been written again by then.
type persister struct {
	store Store
	table *state.Table
	log   *slog.Logger

	kick chan struct{} // buffered 1: a tombstone was collected
	stop chan struct{} // closed by close: flush what is left and exit
	done chan struct{} // closed when run has exited

	mu sync.Mutex
	// durable is the revision up to which every change is on disk. Only run raises it.
	durable uint64
	// advanced is closed and replaced whenever durable rises or err changes.
	advanced chan struct{}
	// err is the last commit's error, nil once a commit succeeds again; it covered
	// the revisions up to errUpTo. cause is the Store's error it wraps.
	err     error
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

func newPersister(s Store, t *state.Table, log *slog.Logger) *persister {
	return &persister{store: s, table: t, log: log,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		advanced: make(chan struct{}), faulted: make(chan struct{})}
}

// forgotten is state.Config.Collected: it runs under the table's lock.
func (p *persister) forgotten(key []byte) {
	p.mu.Lock()
	p.collected = append(p.collected, append([]byte(nil), key...))
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run commits the table's changes after the durable revision until close, then
// commits what is left and returns.
func (p *persister) run() {
	defer close(p.done)
	scan := state.Scan{After: p.durableRev(), Deletions: true, PastCompaction: true,
		MaxEntries: persistMaxEntries, MaxBytes: persistMaxBytes}
	var buf []state.Entry
	var recs []store.Record
	if err := p.store.Writable(); err != nil { // a full disk at start: not ready, and why
		p.failed(err, p.table.Revision())
	}
	for {
		var retry <-chan time.Time
		if err := p.flush(&scan, &buf, &recs); err != nil {
			retry = time.After(persistRetry)
		}
		select {
		case <-p.stop:
			if err := p.flush(&scan, &buf, &recs); err != nil {
				p.log.Error("data dir: the last changes could not be saved at shutdown; anti-entropy brings them back from the peers after the restart",
					"err", err, "durable_revision", p.durableRev(), "latest_revision", p.table.Revision())
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
func (p *persister) flush(scan *state.Scan, buf *[]state.Entry, recs *[]store.Record) error {
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
func (p *persister) failed(cause error, upTo uint64) error {
	err := fmt.Errorf("%w: %v", ErrNotDurable, cause)
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

func (p *persister) faultErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// fault is the node's readiness while commits fail: false and why ("disk full: …"),
// or true when they do not.
func (p *persister) fault() (ok bool, reason string) {
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

// faultChanged is closed when commits start or stop failing.
func (p *persister) faultChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faulted
}

func (p *persister) advance(rev uint64, records, deletes int, took time.Duration) {
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

func (p *persister) durableRev() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.durable
}

// wait returns once every change up to rev is on disk, or with the commit's error, or
// ctx's, or ErrClosed once the persister has stopped short of rev.
func (p *persister) wait(ctx context.Context, rev uint64) error {
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
			if p.durableRev() >= rev {
				return nil
			}
			return ErrClosed
		}
	}
}

// close commits what is left and stops run. Called once, after every writer of the
// table has stopped.
func (p *persister) close() {
	close(p.stop)
	<-p.done
}

// persistStats are the persister's counters, for GetStatus and the metrics.
type persistStats struct {
	Commits, Records, Deletes, Failures uint64
	DiskFull, IOErrors                  uint64 // of Failures
	Full                                bool   // failing now, the disk below the floor
	LastCommit                          time.Duration
	Durable, Latest                     uint64
	Err                                 string
}

func (p *persister) stats() persistStats {
	latest := p.table.Revision()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := persistStats{Commits: p.commits, Records: p.records, Deletes: p.deletes, Failures: p.failures,
		DiskFull: p.diskFull, IOErrors: p.ioErrors, Full: p.err != nil && errors.Is(p.cause, store.ErrDiskFull),
		LastCommit: p.lastCommit, Durable: p.durable, Latest: latest}
	if p.err != nil {
		s.Err = p.err.Error()
	}
	return s
}

// load fills the empty table from the Store and moves the clock past everything the
// store ever committed, so that this node's next version is above its last one before
// the restart (SPEC §14). Called by New, before any goroutine runs.
func (n *Node) load() error {
	start, now := time.Now(), n.cfg.Now()
	var loaded, expired, refused int
	err := n.cfg.Store.Load(func(r store.Record) error {
		off := wire.TaskIDOffset(r.Raw)
		if off < 0 || off+len(r.Key) > len(r.Raw) || string(r.Raw[off:off+len(r.Key)]) != string(r.Key) {
			return fmt.Errorf("record %q: its event does not decode, or names another task_id", r.Key)
		}
		w := state.Write{Key: r.Raw[off : off+len(r.Key)], KeyOffset: off, Raw: r.Raw,
			Stamp: state.Stamp{Version: r.Version, Origin: r.Origin}, Submitted: r.Submitted, Deleted: r.Deleted,
			Own: true} // it was in this table before: the whole bound
		switch n.table.Put(&w, now).Outcome {
		case state.Applied:
			loaded++
		case state.Stale: // a tombstone past --tombstone-ttl: forget it on disk too
			expired++
			n.persist.forgotten(r.Key)
		default:
			refused++
		}
		return nil
	})
	var corrupt *store.CorruptError
	switch {
	case errors.As(err, &corrupt): // says the way out itself
		return fmt.Errorf("--data-dir: loading the state: %w", err)
	case err != nil:
		return fmt.Errorf("--data-dir: loading the state: %w (to start empty instead, move the data dir aside: anti-entropy refills it from the peers)", err)
	}
	hwm := n.cfg.Store.Clock()
	n.clock.restore(hwm)
	st := n.table.Stats()
	n.log.Info("data dir loaded", "keys", loaded, "tombstones", st.Tombstones, "expired_tombstones", expired,
		"clock_high_water_mark", hwm, "took", time.Since(start).Round(time.Millisecond).String())
	if refused > 0 {
		n.log.Warn("data dir holds more than the state table's bounds; the rest was not loaded (anti-entropy does not bring it back either): raise --state-max-keys or --state-max-bytes",
			"refused", refused, "keys", st.Keys, "state_max_keys", n.cfg.State.MaxKeys, "bytes", st.Bytes, "state_max_bytes", n.cfg.State.MaxBytes)
	}
	if limit := maxVersion(now, maxObservedSkew); hwm > limit {
		n.log.Warn("the data dir's clock is ahead of this host's clock: this node's versions continue from it, and peers refuse those more than 5m ahead of theirs; check the host clock",
			"clock_high_water_mark", hwm, "wall_version", wallVersion(now))
	}
	return nil
}
