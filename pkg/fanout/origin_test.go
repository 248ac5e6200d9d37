package fanout

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
	"google.golang.org/protobuf/proto"
)

// syncEntry is an anti-entropy entry of key at version v from origin.
func syncEntry(t *testing.T, origin, key string, v uint64, submitted int64) *fanoutv1.SyncEntry {
	t.Helper()
	raw, err := proto.Marshal(&fanoutv1.Event{TaskId: key, Version: v, Payload: []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	return &fanoutv1.SyncEntry{Event: raw, Origin: origin, SubmittedAtUnixNanos: submitted}
}

// TestOwnOriginAfterWritesOfItsBatch: an entry of this node's origin is judged
// against the table as the entries before it in the same request left it, though the
// apply path puts a request's entries in batches: a peer's newer write of the key,
// earlier in the Push, makes it an old state of the key (STALE), not a planted one.
func TestOwnOriginAfterWritesOfItsBatch(t *testing.T) {
	tn := startTestNode(t, testConfig("a"))
	n, ctx := tn.node, context.Background()
	wall := time.Now()
	v, sub := wallVersion(wall), wall.UnixNano()
	sr := n.own.syncRefused.Load()
	r, err := tn.peer.Push(ctx, &fanoutv1.PushRequest{NodeId: "b", Entries: []*fanoutv1.SyncEntry{
		syncEntry(t, "b", "k", v+1000, sub), syncEntry(t, "a", "k", v, sub)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GetApplied(); got != 1 || n.own.syncRefused.Load() != sr {
		t.Fatalf("applied %d, refused as planted %d; want 1 and 0", got, n.own.syncRefused.Load()-sr)
	}
	if e, ok := n.table.Get([]byte("k")); !ok || e.Stamp != (state.Stamp{Version: v + 1000, Origin: "b"}) {
		t.Fatalf("k holds %v %+v, want b's write", ok, e.Stamp)
	}
}

// TestOwnOriginEntries: entries that claim node a's origin. An echo of a's own write
// changes nothing and is not counted; one that a's process would hold and does not
// (a version at or above its floor, in either band) is refused and counted, by
// Replicate and by anti-entropy alike; one from before the floor is an earlier
// process's write and is restored. a's next write of a refused key wins over it.
func TestOwnOriginEntries(t *testing.T) {
	tn := startTestNode(t, testConfig("a"))
	n, ctx := tn.node, context.Background()
	resp, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("mine", "x")}})
	if err != nil {
		t.Fatal(err)
	}
	mine := resp.GetVersions()[0]
	replicate := func(key string, v uint64) fanoutv1.ItemStatus {
		t.Helper()
		r, err := tn.peer.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "a", Events: []*fanoutv1.Event{{TaskId: key, Version: v}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatuses()[0]
	}
	push := func(key string, v uint64, submitted int64) uint32 {
		t.Helper()
		r, err := tn.peer.Push(ctx, &fanoutv1.PushRequest{NodeId: "b", Entries: []*fanoutv1.SyncEntry{syncEntry(t, "a", key, v, submitted)}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetApplied()
	}
	floor := n.own.floor
	if floor.clock > mine || floor.clock < wallVersion(time.Now().Add(-time.Minute)) {
		t.Fatalf("floor %d: want at or below the first write %d, near the wall clock", floor.clock, mine)
	}
	wall := time.Now()
	now, nanos, sub := wallVersion(wall), uint64(wall.UnixNano()), wall.UnixNano()
	ahead := wallVersion(wall.Add(30 * time.Second))
	before := floor.start - 1 // submitted before the process started
	for _, tc := range []struct {
		name      string
		replicate bool
		key       string
		v         uint64
		submitted int64
		want      string // "echo", "refused", "restored"
	}{
		{"Replicate: an echo of its own write", true, "mine", mine, 0, "echo"},
		{"Replicate: a write it never made", true, "planted-r", now, 0, "refused"},
		{"Replicate: even one from before the start", true, "planted-old", floor.clock - 1, 0, "refused"},
		{"anti-entropy: an echo", false, "mine", mine, sub, "echo"},
		{"anti-entropy: older than its own write", false, "mine", mine - 1, sub, "echo"},
		{"anti-entropy: a write of this process it does not hold", false, "planted-p", now, sub, "refused"},
		{"anti-entropy: one without a submit time", false, "planted-0", now, 0, "refused"},
		{"anti-entropy: a nanosecond version after the start", false, "planted-n", nanos, sub, "refused"},
		{"anti-entropy: before the start, but beyond the clock's reach", false, "planted-a", wallVersion(wall.Add(3 * time.Minute)), before, "refused"},
		{"anti-entropy: before the start, a nanosecond version ahead of now", false, "planted-an", nanos + uint64(time.Minute), before, "refused"},
		{"anti-entropy: below the floor", false, "earlier", floor.clock - 1, sub, "restored"},
		{"anti-entropy: before the start, its clock ahead of the wall", false, "earlier-a", ahead, before, "restored"},
		{"anti-entropy: before the start, a nanosecond version", false, "earlier-n", uint64(before), before, "restored"},
		{"anti-entropy: an earlier process's counter", false, "earlier-c", 7, 0, "restored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr, sr, ss := n.own.replicateRefused.Load(), n.own.syncRefused.Load(), n.own.syncRestored.Load()
			var stored bool
			if tc.replicate {
				st := replicate(tc.key, tc.v)
				if want := map[string]fanoutv1.ItemStatus{"echo": fanoutv1.ItemStatus_ITEM_STATUS_STALE,
					"refused": fanoutv1.ItemStatus_ITEM_STATUS_INVALID}[tc.want]; st != want {
					t.Fatalf("Replicate answered %v, want %v", st, want)
				}
			} else {
				stored = push(tc.key, tc.v, tc.submitted) == 1
			}
			e, held := n.table.Get([]byte(tc.key))
			d := [3]uint64{n.own.replicateRefused.Load() - rr, n.own.syncRefused.Load() - sr, n.own.syncRestored.Load() - ss}
			var want [3]uint64
			switch tc.want {
			case "echo":
				if stored || !held || e.Stamp != (state.Stamp{Version: mine, Origin: "a"}) {
					t.Fatalf("an echo changed the table: stored %v, %+v", stored, e.Stamp)
				}
			case "refused":
				if stored || held {
					t.Fatalf("a planted entry was stored (%v) or is held (%v)", stored, held)
				}
				want[map[bool]int{true: 0, false: 1}[tc.replicate]] = 1
			case "restored":
				if !stored || !held || e.Stamp.Version != tc.v {
					t.Fatalf("an earlier write was not restored: stored %v, held %v %+v", stored, held, e.Stamp)
				}
				want[2] = 1
			}
			if d != want {
				t.Fatalf("counted (replicate refused, anti-entropy refused, restored) %v, want %v", d, want)
			}
		})
	}
	// a's app writes a key a peer tried to plant, and one restored ahead of the wall
	// clock: both are a's own writes now, above the versions it was sent.
	resp, err = tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("planted-p", "mine now"), ev("earlier-a", "mine now")}})
	if err != nil {
		t.Fatal(err)
	}
	for i, above := range []uint64{now, ahead} {
		if r := resp.GetResults()[i]; r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED || resp.GetVersions()[i] <= above {
			t.Fatalf("a's write %d: %v at %d, want ACCEPTED above %d", i, r, resp.GetVersions()[i], above)
		}
	}
	out := collectText(t, NewCollector(n))
	for _, s := range []string{
		`fanout_own_origin_entries_total{outcome="refused",path="replicate"} 2`,
		`fanout_own_origin_entries_total{outcome="refused",path="anti_entropy"} 5`,
		`fanout_own_origin_entries_total{outcome="restored",path="anti_entropy"} 4`,
	} {
		if !strings.Contains(out, s+"\n") {
			t.Errorf("metrics lack %s:\n%s", s, out)
		}
	}
}

// TestOwnOriginAfterRestart: a memory-only node restarted with the same node id gets
// every write of its earlier process back by anti-entropy, none refused; with a
// data dir, a write the earlier process sent but did not commit (kill -9) is
// restored too: its version is below the clock the store saved.
func TestOwnOriginAfterRestart(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("data dir %v", durable), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig("a")
			var st *store.Store
			if durable {
				st = openTestStore(t, dir)
				cfg.Store = st
			}
			first, err := newNode(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var entries []*fanoutv1.SyncEntry // what a peer holds of a's writes
			for i := range 20 {
				key := fmt.Sprintf("k%d", i)
				resp, err := first.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev(key, "v")}})
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, syncEntry(t, "a", key, resp.GetVersions()[0], time.Now().UnixNano()))
			}
			// And one the earlier process sent, but that never reached its disk: the
			// peer holds it, the store does not.
			lost := first.clock.reserve(1)
			if err := first.clock.cover(lost); err != nil {
				t.Fatal(err)
			}
			entries = append(entries, syncEntry(t, "a", "lost", lost, time.Now().UnixNano()))
			first.Close()
			if durable {
				st.Close()
				cfg.Store = openTestStore(t, dir)
			}
			second, err := newNode(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer second.Close()
			applied, err := second.Apply("b", entries)
			if err != nil {
				t.Fatal(err)
			}
			wantApplied := len(entries)
			if durable {
				wantApplied = 1 // the rest were loaded from disk
			}
			if applied != wantApplied || second.own.syncRefused.Load() != 0 || second.own.syncRestored.Load() != uint64(wantApplied) {
				t.Fatalf("applied %d of %d, refused %d, restored %d; want %d applied and restored, none refused",
					applied, len(entries), second.own.syncRefused.Load(), second.own.syncRestored.Load(), wantApplied)
			}
			for _, e := range entries {
				h, _ := second.cfg.Limits.ReadEvent(e.GetEvent())
				if got, ok := second.table.Get(h.TaskID); !ok || got.Stamp.Version != h.Version {
					t.Fatalf("%s after the restart: %v %+v, want version %d", h.TaskID, ok, got.Stamp, h.Version)
				}
			}
		})
	}
}

// TestSourceWritesBoundsSources: past maxOriginSeries sources, the rest share the
// otherOrigin counters, so a peer that calls under ever new node ids cannot grow
// the series of fanout_state_peer_writes_total without bound.
func TestSourceWritesBoundsSources(t *testing.T) {
	var s sourceWrites
	for i := range maxOriginSeries + 10 {
		var t sourceTally
		t.count(state.Result{Outcome: state.Full})
		s.of(fmt.Sprintf("node-%d", i)).add(&t)
	}
	m := s.snapshot()
	if len(m) != maxOriginSeries+1 {
		t.Fatalf("%d sources kept, want %d and the shared one", len(m), maxOriginSeries)
	}
	if got := m[otherOrigin].refused.Load(); got != 10 {
		t.Errorf("the sources past the bound counted %d refused writes, want 10", got)
	}
	if s.of("node-0") != m["node-0"] || s.of("node-999") != m[otherOrigin] {
		t.Error("a known source or one past the bound got new counters")
	}
	c := s.of("node-1")
	var tally sourceTally
	tally.count(state.Result{Outcome: state.Applied, Added: true})
	tally.count(state.Result{Outcome: state.Applied}) // an update: not a new key
	tally.count(state.Result{Outcome: state.Stale})
	c.add(&tally)
	if c.added.Load() != 1 || c.refused.Load() != 1 {
		t.Errorf("node-1: added %d, refused %d; want 1 and 1", c.added.Load(), c.refused.Load())
	}
}

// TestDeletesMakeRoom, through Submit and a data dir: a table at its key bound
// refuses a new key; a delete makes room for it at once; at --state-max-tombstones
// a delete forgets the oldest tombstone early (GetStatus collected_early), on disk
// too, and is never refused.
func TestDeletesMakeRoom(t *testing.T) {
	st := openTestStore(t, t.TempDir())
	cfg := testConfig("a")
	deleted := &tally{} // the keys the store deleted
	cfg.Store = watchedStore{st, deleted}
	cfg.State.MaxKeys, cfg.State.MaxTombstones = 3, 2
	n, err := newNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx := context.Background()
	submit := func(id string, del bool) fanoutv1.EventOutcome {
		t.Helper()
		e := ev(id, "v")
		e.Deleted = del
		resp, err := n.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{e}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0].GetOutcome()
	}
	const accepted, refused = fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED, fanoutv1.EventOutcome_EVENT_OUTCOME_REFUSED
	for _, step := range []struct {
		id   string
		del  bool
		want fanoutv1.EventOutcome
	}{
		{"k1", false, accepted}, {"k2", false, accepted}, {"k3", false, accepted},
		{"k4", false, refused},                          // at the key bound
		{"k1", true, accepted}, {"k4", false, accepted}, // a delete makes room at once
		{"k2", true, accepted}, {"k3", true, accepted}, // a third tombstone: k1's goes early
		{"k4", true, accepted},
	} {
		if got := submit(step.id, step.del); got != step.want {
			t.Fatalf("%s (deleted %v): %v, want %v", step.id, step.del, got, step.want)
		}
	}
	s := n.Status().GetState()
	if s.GetKeys() != 0 || s.GetTombstones() != 2 || s.GetCollectedEarly() != 2 || s.GetMaxTombstones() != 2 || s.GetRefused() != 1 {
		t.Fatalf("state status %v: want 0 keys, 2 tombstones (k3, k4), 2 collected early, 1 refused", s)
	}
	// The running persister deletes them (the node's Close would too); it counts them
	// after the commit, which its Close waits for.
	deleted.Await(t, "the early-collected tombstones deleted on disk", 2)
	n.Close()
	if d := n.persist.Stats().Deletes; d != 2 {
		t.Fatalf("the data dir deleted %d early-collected tombstones, want 2", d)
	}
	recs := storeRecords(t, st)
	for _, id := range []string{"k1", "k2"} {
		if _, ok := recs[id]; ok {
			t.Errorf("%s, collected early, is still on disk", id)
		}
	}
	for _, id := range []string{"k3", "k4"} {
		if r, ok := recs[id]; !ok || !r.Deleted {
			t.Errorf("%s: %+v %v, want its tombstone on disk", id, r, ok)
		}
	}
}
