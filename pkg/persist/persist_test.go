package persist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

// The node-level tests of the data dir (a restart keeps every key and the clock, the
// clock lease, SubmitStream's shared commits, Submit's answers on a failing or full
// disk) are in pkg/fanout's datadir_test.go. These test the persister alone, on a
// real table and a real store.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openTestStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.DefaultConfig())
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// faultyStore fails every Commit, RaiseClock and Writable with err while err is set.
type faultyStore struct {
	*store.Store
	err atomic.Pointer[error]
}

func (f *faultyStore) fault() error {
	if e := f.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (f *faultyStore) set(err error) {
	if err == nil {
		f.err.Store(nil)
		return
	}
	f.err.Store(&err)
}

func (f *faultyStore) Commit(puts []store.Record, deletes [][]byte) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.Commit(puts, deletes)
}

func (f *faultyStore) Writable() error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Store.Writable()
}

// rig is a persister following a table, on store s.
type rig struct {
	p     *Persister
	table *state.Table
	now   atomic.Int64
}

func newRig(t *testing.T, s Store, ttl time.Duration) *rig {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Store, cfg.Logger = s, slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Retry = 10 * time.Millisecond // the recovery tests wait for a retry
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg := state.DefaultConfig()
	scfg.MaxKeys, scfg.MaxTombstones, scfg.TombstoneTTL = 1000, 1000, ttl
	scfg.Collected = p.Forgotten
	table, err := state.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{p: p, table: table}
	r.now.Store(time.Now().UnixNano())
	if _, err := p.Load(table, r.clock()); err != nil {
		t.Fatal(err)
	}
	p.Start()
	t.Cleanup(p.Close)
	return r
}

func (r *rig) clock() time.Time { return time.Unix(0, r.now.Load()) }

// put writes key at version as the node's own write and returns its revision.
func (r *rig) put(t *testing.T, key string, version uint64, deleted bool) uint64 {
	t.Helper()
	raw, err := proto.Marshal(&fanoutv1.Event{TaskId: key, Version: version, Deleted: deleted})
	if err != nil {
		t.Fatal(err)
	}
	off := wire.TaskIDOffset(raw)
	res := r.table.Put(&state.Write{Key: raw[off : off+len(key)], KeyOffset: off, Raw: raw,
		Stamp: state.Stamp{Version: version, Origin: "a"}, Submitted: r.now.Load(), Deleted: deleted, Own: true}, r.clock())
	if res.Outcome != state.Applied {
		t.Fatalf("put %s v%d: %v", key, version, res.Outcome)
	}
	return res.Revision
}

func records(t *testing.T, s *store.Store) map[string]store.Record {
	t.Helper()
	out := map[string]store.Record{}
	if err := s.Load(func(r store.Record) error {
		r.Key, r.Raw = append([]byte(nil), r.Key...), append([]byte(nil), r.Raw...)
		out[string(r.Key)] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no store", Config{Logger: slog.Default(), Retry: time.Second}, "persist.Config.Store"},
		{"no logger", Config{Store: &faultyStore{}, Retry: time.Second}, "persist.Config.Logger"},
		{"no retry", Config{Store: &faultyStore{}, Logger: slog.Default()}, "persist.Config.Retry"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New: %v; want an error naming %s", err, c.want)
			}
		})
	}
}

// TestWaitReturnsOnceOnDisk: Wait returns once the revision is committed, and the
// record is in the store then, with its stamp.
func TestWaitReturnsOnceOnDisk(t *testing.T) {
	s := openTestStore(t)
	r := newRig(t, s, time.Hour)
	rev := r.put(t, "k", 7, false)
	if err := r.p.Wait(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	if d := r.p.Durable(); d < rev {
		t.Fatalf("Wait returned with Durable %d below %d", d, rev)
	}
	if rec, ok := records(t, s)["k"]; !ok || rec.Version != 7 || rec.Origin != "a" {
		t.Fatalf("store has %+v %v; want k at version 7 from a", rec, ok)
	}
	if st := r.p.Stats(); st.Records != 1 || st.Commits != 1 || st.Err != "" {
		t.Fatalf("stats %+v; want one record in one commit", st)
	}
}

// TestGroupCommit: concurrent writers that each wait share commits.
func TestGroupCommit(t *testing.T) {
	r := newRig(t, openTestStore(t), time.Hour)
	const writers, each = 16, 30
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := r.p.Wait(context.Background(), r.put(t, fmt.Sprintf("w%d/%d", w, i), 1, false)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if s := r.p.Stats(); s.Records != writers*each || s.Commits >= writers*each {
		t.Fatalf("%d records in %d commits; want all %d, in fewer commits than writes", s.Records, s.Commits, writers*each)
	}
}

// TestForgottenDeleted: a tombstone the table collects is deleted from the store,
// unless its key was written again by then.
func TestForgottenDeleted(t *testing.T) {
	s := openTestStore(t)
	r := newRig(t, s, time.Hour)
	r.put(t, "gone", 1, true)
	r.put(t, "back", 1, true)
	if err := r.p.Wait(context.Background(), r.put(t, "back", 2, false)); err != nil {
		t.Fatal(err)
	}
	r.now.Add(int64(2 * time.Hour))
	if c := r.table.Collect(r.clock()); c != 1 {
		t.Fatalf("collected %d tombstones, want 1 (gone)", c)
	}
	// A forgotten key joins the next commit: the one of a write after the Collect
	// takes it at the latest.
	if err := r.p.Wait(context.Background(), r.put(t, "after", 1, false)); err != nil {
		t.Fatal(err)
	}
	if st := r.p.Stats(); st.Deletes != 1 {
		t.Fatalf("stats %+v: want the collected tombstone deleted", st)
	}
	recs := records(t, s)
	if _, ok := recs["gone"]; ok {
		t.Fatal("the collected tombstone gone is still on disk")
	}
	if rec, ok := recs["back"]; !ok || rec.Deleted {
		t.Fatalf("back, written again: %+v %v; want it live on disk", rec, ok)
	}
}

// waitFault waits until Fault reports want, by FaultChanged.
func waitFault(t *testing.T, p *Persister, want bool, reason string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		changed := p.FaultChanged()
		ok, why := p.Fault()
		if ok == want && strings.HasPrefix(why, reason) {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("Fault() = %v %q; want %v %q", ok, why, want, reason)
		}
	}
}

// TestCommitFailure: while commits fail, waiters get a *CommitError with the cause
// and Fault says why; once the store takes commits again, the persister commits the
// same changes by itself and Fault clears.
func TestCommitFailure(t *testing.T) {
	fs := &faultyStore{Store: openTestStore(t)}
	r := newRig(t, fs, time.Hour)
	ioErr := errors.New("no space left on device")
	fs.set(ioErr)
	rev := r.put(t, "x", 1, false)
	err := r.p.Wait(context.Background(), rev)
	var ce *CommitError
	if !errors.As(err, &ce) || !errors.Is(err, ioErr) {
		t.Fatalf("Wait with a failing store: %v; want a CommitError of the store's error", err)
	}
	waitFault(t, r.p, false, "data dir failing: no space left on device")
	if st := r.p.Stats(); st.Failures == 0 || st.Err == "" || st.Full || st.Durable >= rev {
		t.Fatalf("stats %+v while failing", st)
	}
	fs.set(nil)
	waitFault(t, r.p, true, "")
	if err := r.p.Wait(context.Background(), rev); err != nil {
		t.Fatalf("Wait once the store works: %v", err)
	}
	if _, ok := records(t, fs.Store)["x"]; !ok {
		t.Fatal("x, applied while the store failed, never reached it")
	}
}

// TestDiskFull: a store below its free-space floor at start makes Fault say "disk
// full: …" and counts DiskFull; room again clears it.
func TestDiskFull(t *testing.T) {
	fs := &faultyStore{Store: openTestStore(t)}
	fs.set(fmt.Errorf("%w: 1.0 MiB free on /data, below the floor of 64.0 MiB", store.ErrDiskFull))
	r := newRig(t, fs, time.Hour)
	waitFault(t, r.p, false, "disk full: 1.0 MiB free on /data, below the floor")
	if st := r.p.Stats(); st.DiskFull == 0 || !st.Full {
		t.Fatalf("stats %+v: want DiskFull counted and Full", st)
	}
	fs.set(nil)
	waitFault(t, r.p, true, "")
}

// TestCloseStopsWaiters: Close commits what is left; a wait beyond the table's
// revision returns ErrStopped.
func TestCloseStopsWaiters(t *testing.T) {
	s := openTestStore(t)
	r := newRig(t, s, time.Hour)
	rev := r.put(t, "k", 1, false)
	errc := make(chan error, 1)
	go func() { errc <- r.p.Wait(context.Background(), rev+1) }()
	r.p.Close()
	r.p.Close() // idempotent
	if err := <-errc; !errors.Is(err, ErrStopped) {
		t.Fatalf("Wait past the last revision after Close: %v; want ErrStopped", err)
	}
	if d := r.p.Durable(); d < rev {
		t.Fatalf("Close left Durable at %d, below %d", d, rev)
	}
	if _, ok := records(t, s)["k"]; !ok {
		t.Fatal("Close did not commit k")
	}
}

// TestLoad: Load puts every record in an empty table at its stamp, forgets a
// tombstone past its ttl on disk too, and reports the store's clock.
func TestLoad(t *testing.T) {
	s := openTestStore(t)
	r := newRig(t, s, time.Hour)
	r.put(t, "live", 5, false)
	r.put(t, "dead", 6, true)
	if err := r.p.Wait(context.Background(), r.put(t, "old", 7, true)); err != nil {
		t.Fatal(err)
	}
	if err := s.RaiseClock(100); err != nil {
		t.Fatal(err)
	}
	r.p.Close()

	cfg := DefaultConfig()
	cfg.Store, cfg.Logger = s, slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg := state.DefaultConfig()
	scfg.TombstoneTTL = time.Hour
	scfg.Collected = p.Forgotten
	table, err := state.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	// An hour and a minute later: every tombstone is past its ttl.
	l, err := p.Load(table, r.clock().Add(time.Hour+time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if l.Keys != 1 || l.Expired != 2 || l.Refused != 0 || l.Clock != 100 {
		t.Fatalf("Load = %+v; want 1 key, 2 expired, clock 100", l)
	}
	if e, ok := table.Get([]byte("live")); !ok || e.Stamp.Version != 5 || e.Stamp.Origin != "a" {
		t.Fatalf("live after Load: %v %+v", ok, e.Stamp)
	}
	p.Start()
	p.Close() // the first commit deletes the expired tombstones
	recs := records(t, s)
	if _, ok := recs["dead"]; ok || len(recs) != 1 {
		t.Fatalf("store after the load holds %d records (dead: %v); want only live", len(recs), ok)
	}
}
