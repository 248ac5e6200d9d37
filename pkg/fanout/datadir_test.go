package fanout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/store"
)

// openStore opens a pebble store in dir, closed at the end of the test (and by the
// test itself before a reopen).
func openTestStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, store.DefaultConfig())
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// storeRecords reads every record of the store in dir.
func storeRecords(t *testing.T, st *store.Store) map[string]store.Record {
	t.Helper()
	out := map[string]store.Record{}
	if err := st.Load(func(r store.Record) error {
		r.Key, r.Raw = append([]byte(nil), r.Key...), append([]byte(nil), r.Raw...)
		out[string(r.Key)] = r
		return nil
	}); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return out
}

// TestDataDirRestart: with a Store, what Submit accepted is on disk when it returns;
// a node started on the same store holds every key at its version, and its clock
// continues above the versions it wrote before.
func TestDataDirRestart(t *testing.T) {
	dir := t.TempDir()
	st := openTestStore(t, dir)
	cfg := testConfig("a")
	cfg.Store = st
	n, err := newNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := map[string]uint64{}
	var top uint64
	for i := range 50 {
		evs := []*fanoutv1.Event{ev(fmt.Sprintf("k%d", i), "v"), ev(fmt.Sprintf("k%d", i+1000), "w")}
		evs[1].Deleted = i%5 == 0
		resp, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: evs})
		if err != nil {
			t.Fatal(err)
		}
		// Durable when Submit returns: the persister's watermark covers its revisions.
		for j, r := range resp.GetResults() {
			if got := n.persist.Durable(); got < r.GetRevision() {
				t.Fatalf("Submit returned with revision %d, durable only up to %d", r.GetRevision(), got)
			}
			want[evs[j].TaskId] = resp.Versions[j]
			top = max(top, resp.Versions[j])
		}
	}
	n.Close()
	if got := st.Clock(); got < top {
		t.Fatalf("store clock %d below the highest version written %d", got, top)
	}
	recs := storeRecords(t, st)
	if len(recs) != len(want) {
		t.Fatalf("store holds %d records, want %d", len(recs), len(want))
	}
	st.Close()

	// Restart on the same dir, with a wall clock set back an hour: the versions must
	// still go up.
	st2 := openTestStore(t, dir)
	cfg2 := testConfig("a")
	cfg2.Store = st2
	cfg2.Now = func() time.Time { return time.Now().Add(-time.Hour) }
	n2, err := newNode(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	for id, v := range want {
		e, ok := n2.table.Get([]byte(id))
		if !ok || e.Stamp.Version != v || e.Stamp.Origin != "a" {
			t.Fatalf("%s after restart: %v %+v, want version %d from a", id, ok, e.Stamp, v)
		}
	}
	resp, err := n2.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k1", "after")}})
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.Versions[0]; v <= top || resp.Results[0].Outcome != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
		t.Fatalf("first write after restart: version %d (%v), want above %d, the highest before", v, resp.Results[0].Outcome, top)
	}
}

// TestDataDirForgetsCollectedTombstones: a tombstone the table collects is deleted on
// disk, unless the key was written again; one past its ttl at load is deleted too.
func TestDataDirForgetsCollectedTombstones(t *testing.T) {
	dir := t.TempDir()
	st := openTestStore(t, dir)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	cfg := testConfig("a")
	deleted := &tally{} // the keys the store deleted
	cfg.Store = watchedStore{st, deleted}
	cfg.Now = func() time.Time { return time.Unix(0, now.Load()) }
	cfg.State.TombstoneTTL = time.Hour
	n, err := newNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	del := func(id string) {
		e := ev(id, "")
		e.Deleted = true
		if _, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{e}}); err != nil {
			t.Fatal(err)
		}
	}
	del("gone")
	del("back")
	del("late") // its ttl passes while the node is down
	now.Add(int64(59 * time.Minute))
	del("late2")
	if _, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("back", "again")}}); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(2 * time.Minute)) // "gone" and "late" are past the ttl, "late2" is not
	if c := n.table.Collect(cfg.Now()); c != 2 {
		t.Fatalf("collected %d tombstones, want 2 (gone, late)", c)
	}
	// The running persister deletes them (the node's Close would too); it counts them
	// after the commit, which its Close waits for.
	deleted.Await(t, "the collected tombstones deleted on disk", 2)
	n.Close()
	if d := n.persist.Stats().Deletes; d != 2 {
		t.Fatalf("the data dir deleted %d collected tombstones, want 2", d)
	}
	recs := storeRecords(t, st)
	if _, ok := recs["gone"]; ok {
		t.Fatal("collected tombstone gone is still on disk")
	}
	if r, ok := recs["back"]; !ok || r.Deleted {
		t.Fatalf("back, written again after its delete: %+v %v, want it live on disk", r, ok)
	}
	if r, ok := recs["late2"]; !ok || !r.Deleted {
		t.Fatalf("late2, a tombstone within its ttl: %+v %v, want it on disk", r, ok)
	}
	st.Close()

	// A tombstone that expires while the node is down is dropped at load.
	st2 := openTestStore(t, dir)
	cfg.Store = st2
	now.Add(int64(2 * time.Hour))
	n2, err := newNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n2.table.Get([]byte("late2")); ok {
		t.Fatal("late2, past its ttl at load, was loaded")
	}
	n2.Close()
	if r, ok := storeRecords(t, st2)["late2"]; ok {
		t.Fatalf("late2 still on disk after a load that found it expired: %+v", r)
	}
}

// failingStore fails every Commit while fail is set.
type failingStore struct {
	*store.Store
	fail atomic.Bool
}

func (f *failingStore) Commit(puts []store.Record, deletes [][]byte) error {
	if f.fail.Load() {
		return errors.New("no space left on device")
	}
	return f.Store.Commit(puts, deletes)
}

// TestDataDirCommitFailure: while the disk refuses commits, Submit answers
// UNAVAILABLE naming the cause; once it takes them again, the persister catches up
// with everything, the refused Submit's event included.
func TestDataDirCommitFailure(t *testing.T) {
	dir := t.TempDir()
	fs := &failingStore{Store: openTestStore(t, dir)}
	cfg := testConfig("a")
	cfg.Store = fs
	tn := startTestNode(t, cfg)
	ctx := context.Background()
	fs.fail.Store(true)
	_, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("x", "1")}})
	if !errors.Is(err, ErrNotDurable) || // the edge's UNAVAILABLE
		tn.node.persist.Stats().Err == "" {
		t.Fatalf("Submit with a failing disk: %v; want UNAVAILABLE from ErrNotDurable", err)
	}
	fs.fail.Store(false)
	resp, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("y", "2")}})
	if err != nil {
		t.Fatalf("Submit once the disk works again: %v", err)
	}
	if d := tn.node.persist.Durable(); d < resp.Results[0].Revision {
		t.Fatalf("durable %d below the accepted revision %d", d, resp.Results[0].Revision)
	}
	tn.node.Close()
	recs := storeRecords(t, fs.Store)
	if _, ok := recs["x"]; !ok {
		t.Fatal("x, accepted in memory while the disk failed, never reached the disk")
	}
}

// TestDataDirGroupCommit: concurrent Submits share commits.
func TestDataDirGroupCommit(t *testing.T) {
	st := openTestStore(t, t.TempDir())
	cfg := testConfig("a")
	cfg.Store = st
	n, err := newNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const writers, each = 16, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := n.Submit(context.Background(), &fanoutv1.SubmitRequest{
					Events: []*fanoutv1.Event{ev(fmt.Sprintf("w%d/%d", w, i), "v")}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s := n.persist.Stats()
	if s.Records != writers*each || s.Commits >= writers*each {
		t.Fatalf("%d records in %d commits; want all %d, in fewer commits than Submits", s.Records, s.Commits, writers*each)
	}
	t.Logf("%d Submits, %d commits", writers*each, s.Commits)
}

// TestDataDirSubmitStream: with a Store, SubmitStream answers QUEUED requests in the
// order they were read, each once it is on disk, while the next ones are applied: the
// requests in flight share commits.
func TestDataDirSubmitStream(t *testing.T) {
	st := openTestStore(t, t.TempDir())
	cfg := testConfig("a")
	cfg.Store = st
	tn := startTestNode(t, cfg)
	stream, err := tn.app.SubmitStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const requests = 200
	for i := range requests {
		if err := stream.Send(&fanoutv1.SubmitRequest{RequestId: uint64(i + 1),
			Events: []*fanoutv1.Event{ev(fmt.Sprintf("s%d", i), "v")}}); err != nil {
			t.Fatal(err)
		}
	}
	stream.CloseSend()
	for i := range requests {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if resp.GetRequestId() != uint64(i+1) {
			t.Fatalf("response %d is for request %d: QUEUED answers must keep the order", i, resp.GetRequestId())
		}
		if d := tn.node.persist.Durable(); d < resp.GetResults()[0].GetRevision() {
			t.Fatalf("request %d answered at revision %d, durable only up to %d", i, resp.GetResults()[0].GetRevision(), d)
		}
	}
	if s := tn.node.persist.Stats(); s.Commits >= requests {
		t.Fatalf("%d pipelined requests took %d commits; want them shared", requests, s.Commits)
	} else {
		t.Logf("%d pipelined requests, %d commits", requests, s.Commits)
	}
}

// TestDataDirClockLease: a version handed out is covered on disk before it can leave
// the node, even if its event never reaches the disk: a restarted node never hands
// it out again (with the same origin and another payload, two nodes would disagree
// for good: the digests compare stamps, not payloads).
func TestDataDirClockLease(t *testing.T) {
	dir := t.TempDir()
	fs := &failingStore{Store: openTestStore(t, dir)}
	cfg := testConfig("a")
	cfg.Store = fs
	n, err := newNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ahead := wallVersion(time.Now().Add(50 * time.Second)) // the clock runs ahead of the wall
	if _, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Version: ahead}}}); err != nil {
		t.Fatal(err)
	}
	fs.fail.Store(true) // x is applied and queued for the peers, but never committed
	resp, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("x", "first")}})
	if !errors.Is(err, ErrNotDurable) { // the edge's UNAVAILABLE
		t.Fatalf("Submit with a failing disk: %v, %v; want UNAVAILABLE", resp, err)
	}
	sent, _ := n.table.Get([]byte("x"))
	n.Close()
	fs.Store.Close()

	st := openTestStore(t, dir)
	cfg.Store = st
	n2, err := newNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if _, ok := n2.table.Get([]byte("x")); ok {
		t.Fatal("x was never committed, yet it was loaded")
	}
	resp, err = n2.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("x", "second")}})
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.Versions[0]; v <= sent.Stamp.Version {
		t.Fatalf("after the restart x got version %d, not above %d, which the node handed out (and sent) before", v, sent.Stamp.Version)
	}
}

// fullStore refuses every write with store.ErrDiskFull while full is set, as the
// store does below its free-space floor.
type fullStore struct {
	*store.Store
	full atomic.Bool
}

func (f *fullStore) check() error {
	if f.full.Load() {
		return fmt.Errorf("%w: 1.0 MiB free on /data, below the floor of 64.0 MiB", store.ErrDiskFull)
	}
	return nil
}

func (f *fullStore) Commit(puts []store.Record, deletes [][]byte) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Commit(puts, deletes)
}

func (f *fullStore) RaiseClock(v uint64) error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.RaiseClock(v)
}

func (f *fullStore) Writable() error {
	if err := f.check(); err != nil {
		return err
	}
	return f.Store.Writable()
}

// TestDataDirDiskFull: a disk below the floor, at start or later, makes the node
// not ready with "disk full: …" and Submit UNAVAILABLE with the reason, while reads
// are served; once there is room it is ready again by itself, and what it applied in
// memory meanwhile reaches the disk.
func TestDataDirDiskFull(t *testing.T) {
	fs := &fullStore{Store: openTestStore(t, t.TempDir())}
	fs.full.Store(true) // full at start
	cfg := testConfig("a")
	cfg.Store = fs
	tn := startTestNode(t, cfg)
	ctx := context.Background()
	waitReadiness := func(want bool, reason string) {
		t.Helper()
		deadline := time.After(10 * time.Second) // generous: a busy machine
		for {
			changed := tn.node.ReadinessChanged()
			ok, why := tn.node.Readiness()
			if ok == want && strings.HasPrefix(why, reason) {
				return
			}
			select {
			case <-changed:
			case <-tn.node.Ready(): // the bootstrap's end also changes it
			case <-deadline:
				t.Fatalf("readiness %v %q; want %v %q", ok, why, want, reason)
			}
		}
	}
	waitReadiness(false, "disk full: 1.0 MiB free on /data, below the floor")
	_, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("x", "1")}})
	if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "disk full") { // the edge's UNAVAILABLE
		t.Fatalf("Submit on a full disk: %v; want UNAVAILABLE saying disk full", err)
	}
	// A peer's write is applied in memory, and served.
	if _, err := tn.node.Replicate(ctx, Caller{}, &fanoutv1.ReplicateRequest{OriginNode: "b", Events: []*fanoutv1.Event{
		{TaskId: "p", Version: 7}}}); err != nil {
		t.Fatalf("Replicate on a full disk: %v", err)
	}
	page, err := tn.app.Get(ctx, &fanoutv1.GetRequest{Prefix: "p"})
	if err != nil || len(page.Entries) != 1 {
		t.Fatalf("Get on a full disk: %v, %d entries; want p", err, len(page.GetEntries()))
	}
	if st := tn.node.persist.Stats(); st.DiskFull == 0 || !st.Full {
		t.Errorf("persist stats %+v: want DiskFull counted and Full", st)
	}

	fs.full.Store(false)
	<-tn.node.Ready()
	waitReadiness(true, "")
	if _, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("y", "3")}}); err != nil {
		t.Fatalf("Submit once there is room: %v", err)
	}
	tn.node.Close()
	recs := storeRecords(t, fs.Store)
	for _, k := range []string{"p", "y"} {
		if _, ok := recs[k]; !ok {
			t.Errorf("%s is not on disk after the disk had room again", k)
		}
	}
}
