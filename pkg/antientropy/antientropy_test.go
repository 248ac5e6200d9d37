package antientropy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
)

// side is one node of a test: its table and Syncer.
type side struct {
	id  string
	tab *state.Table
	s   *Syncer
	now time.Time
}

func newSide(t testing.TB, id string, messageBytes int) *side {
	tab, err := state.New(state.Config{MaxKeys: 1 << 20, MaxBytes: 1 << 30, TombstoneTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sd := &side{id: id, tab: tab, now: time.Now()}
	sd.s, err = New(Config{NodeID: id, Table: tab, Apply: sd.apply, MessageBytes: messageBytes})
	if err != nil {
		t.Fatal(err)
	}
	return sd
}

// apply is a node's Apply: validate all, then store each.
func (sd *side) apply(_ string, es []*fanoutv1.SyncEntry) (int, error) {
	evs := make([]*fanoutv1.Event, len(es))
	for i, e := range es {
		evs[i] = new(fanoutv1.Event)
		if err := proto.Unmarshal(e.GetEvent(), evs[i]); err != nil || evs[i].GetTaskId() == "" || e.GetOrigin() == "" {
			return 0, fmt.Errorf("%w: entries[%d]: not an event", ErrInvalid, i)
		}
	}
	n := 0
	for i, e := range es {
		raw := e.GetEvent()
		off := bytes.Index(raw, []byte(evs[i].GetTaskId()))
		w := &state.Write{Key: raw[off : off+len(evs[i].GetTaskId())], KeyOffset: off, Raw: raw,
			Stamp:     state.Stamp{Version: evs[i].GetVersion(), Origin: e.GetOrigin()},
			Submitted: e.GetSubmittedAtUnixNanos(), Deleted: evs[i].GetDeleted()}
		if sd.tab.Put(w, sd.now).Outcome == state.Applied {
			n++
		}
	}
	return n, nil
}

func (sd *side) put(key string, v uint64, origin string, del bool) {
	raw, _ := proto.Marshal(&fanoutv1.Event{TaskId: key, Version: v, Deleted: del, Payload: []byte(origin)})
	off := bytes.Index(raw, []byte(key))
	sd.tab.Put(&state.Write{Key: raw[off : off+len(key)], KeyOffset: off, Raw: raw,
		Stamp: state.Stamp{Version: v, Origin: origin}, Submitted: sd.now.UnixNano(), Deleted: del}, sd.now)
}

// wire is a Peer that calls a Syncer through protobuf encoding, as gRPC would.
type wire struct {
	to    *Syncer
	calls map[string]int
}

func roundTrip[T proto.Message](t T, into T) T {
	b, err := proto.Marshal(t)
	if err != nil {
		panic(err)
	}
	if err := proto.Unmarshal(b, into); err != nil {
		panic(err)
	}
	return into
}

func (w *wire) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	w.calls["digest"]++
	resp, err := w.to.Digest(roundTrip(req, new(fanoutv1.DigestRequest)))
	if err != nil {
		return nil, err
	}
	return roundTrip(resp, new(fanoutv1.DigestResponse)), nil
}

func (w *wire) Pull(_ context.Context, req *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error {
	w.calls["pull"]++
	return w.to.Pull(roundTrip(req, new(fanoutv1.PullRequest)), func(resp *fanoutv1.PullResponse) error {
		w.calls["pull message"]++
		return recv(roundTrip(resp, new(fanoutv1.PullResponse)))
	})
}

func (w *wire) Push(_ context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	w.calls["push"]++
	resp, err := w.to.Push(roundTrip(req, new(fanoutv1.PushRequest)))
	if err != nil {
		return nil, err
	}
	return roundTrip(resp, new(fanoutv1.PushResponse)), nil
}

func dial(to *side) *wire { return &wire{to: to.s, calls: map[string]int{}} }

// winners is the reference: every key's winning stamp over both tables.
func winners(sides ...*side) map[string]state.Entry {
	out := map[string]state.Entry{}
	for _, sd := range sides {
		var set state.LeafSet
		for l := range uint32(state.DigestLeaves) {
			set.Add(l)
		}
		sd.tab.ScanLeaves(&set, func(e *state.Entry) bool {
			if cur, ok := out[string(e.Key)]; !ok || e.Stamp.Newer(cur.Stamp) {
				out[string(e.Key)] = *e
			}
			return true
		})
	}
	return out
}

func checkHolds(t *testing.T, sd *side, want map[string]state.Entry) {
	t.Helper()
	for key, w := range want {
		got, ok := sd.tab.Get([]byte(key))
		if !ok || got.Stamp != w.Stamp || got.Deleted != w.Deleted || !bytes.Equal(got.Raw, w.Raw) {
			t.Fatalf("%s holds %s at %+v (found %v), want %+v", sd.id, key, got.Stamp, ok, w.Stamp)
		}
	}
	if st := sd.tab.Stats(); st.Keys+st.Tombstones != len(want) {
		t.Fatalf("%s holds %d keys and %d tombstones, want %d in all", sd.id, st.Keys, st.Tombstones, len(want))
	}
}

// TestRoundAgainstModel: two tables with random, overlapping histories; after one
// round each holds every key's winner, and the next round finds them in sync.
func TestRoundAgainstModel(t *testing.T) {
	for _, tc := range []struct {
		name         string
		keys, writes int
		messageBytes int
	}{
		{"empty against empty", 0, 0, 0},
		{"few keys", 50, 200, 0},
		{"many keys, one group", 5000, 12000, 0},
		{"many keys, many groups and messages", 5000, 12000, 4 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.keys), uint64(tc.writes)))
			a, b := newSide(t, "a", tc.messageBytes), newSide(t, "b", tc.messageBytes)
			for range tc.writes {
				key := fmt.Sprintf("svc/%d", rng.IntN(tc.keys))
				sd := []*side{a, b}[rng.IntN(2)]
				v, origin := uint64(1+rng.IntN(50)), []string{"a", "b", "c"}[rng.IntN(3)]
				// A (version, origin) is one event everywhere: whether it deletes
				// follows from it.
				sd.put(key, v, origin, (int(v)+len(key)+int(origin[0]))%6 == 0)
			}
			want := winners(a, b)
			w := dial(b)
			r, err := a.s.Round(context.Background(), w, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkHolds(t, a, want)
			checkHolds(t, b, want)
			if a.tab.DigestRoot() != b.tab.DigestRoot() {
				t.Fatal("tables hold the same entries, roots differ")
			}
			t.Logf("%+v calls %v", r, w.calls)
			if tc.messageBytes > 0 && w.calls["pull"] < 2 {
				t.Errorf("%d pulls with %d-byte messages: stamps were not grouped", w.calls["pull"], tc.messageBytes)
			}
			r2, err := a.s.Round(context.Background(), dial(b), nil)
			if err != nil || !r2.InSync || r2.Pulled+r2.Pushed != 0 {
				t.Fatalf("second round %+v, %v; want in sync", r2, err)
			}
			if r2.Bytes > 200 {
				t.Errorf("a round in sync cost %d bytes", r2.Bytes)
			}
		})
	}
}

// TestRoundNewNode: a node with nothing pulls everything; the other pulls nothing.
func TestRoundNewNode(t *testing.T) {
	a, b := newSide(t, "a", 64<<10), newSide(t, "b", 64<<10)
	for i := range 10000 {
		b.put(fmt.Sprintf("k%d", i), uint64(i+1), "b", i%100 == 0)
	}
	r, err := a.s.Round(context.Background(), dial(b), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pulled != 10000 || r.Pushed != 0 {
		t.Fatalf("%+v: want 10000 pulled, 0 pushed", r)
	}
	checkHolds(t, a, winners(b))
}

func TestServeRefusesBadRequests(t *testing.T) {
	a := newSide(t, "a", 0)
	a.put("x", 1, "a", false)
	leafX := state.LeafOf([]byte("x"))
	for _, tc := range []struct {
		name string
		call func() error
		want error
		msg  string
	}{
		{"tree version", func() error {
			_, err := a.s.Digest(&fanoutv1.DigestRequest{NodeId: "b", TreeVersion: 9, Nodes: []uint32{0}})
			return err
		}, ErrTreeVersion, "tree_version 9"},
		{"no node id", func() error {
			_, err := a.s.Digest(&fanoutv1.DigestRequest{TreeVersion: 1, Nodes: []uint32{0}})
			return err
		}, ErrInvalid, "node_id"},
		{"level too deep", func() error {
			_, err := a.s.Digest(&fanoutv1.DigestRequest{NodeId: "b", TreeVersion: 1, Level: 4, Nodes: []uint32{0}})
			return err
		}, ErrInvalid, "level 4"},
		{"node out of range", func() error {
			_, err := a.s.Digest(&fanoutv1.DigestRequest{NodeId: "b", TreeVersion: 1, Level: 1, Nodes: []uint32{16}})
			return err
		}, ErrInvalid, "out of range"},
		{"too many nodes", func() error {
			_, err := a.s.Digest(&fanoutv1.DigestRequest{NodeId: "b", TreeVersion: 1, Level: 3, Nodes: make([]uint32, 4097)})
			return err
		}, ErrInvalid, "4097 nodes"},
		{"leaves descending", func() error {
			return a.s.Pull(&fanoutv1.PullRequest{NodeId: "b", Leaves: []uint32{5, 3}}, nil)
		}, ErrInvalid, "leaves[1]"},
		{"leaf out of range", func() error {
			return a.s.Pull(&fanoutv1.PullRequest{NodeId: "b", Leaves: []uint32{state.DigestLeaves}}, nil)
		}, ErrInvalid, "leaves[0]"},
		{"stamp outside the leaves", func() error {
			return a.s.Pull(&fanoutv1.PullRequest{NodeId: "b", Leaves: []uint32{leafX ^ 1},
				Have: []*fanoutv1.KeyStamp{{TaskId: "x", Version: 1, Origin: "b"}}}, nil)
		}, ErrInvalid, "have[0].task_id"},
		{"stamp twice", func() error {
			return a.s.Pull(&fanoutv1.PullRequest{NodeId: "b", Leaves: []uint32{leafX},
				Have: []*fanoutv1.KeyStamp{{TaskId: "x", Version: 1, Origin: "b"}, {TaskId: "x", Version: 2, Origin: "b"}}}, nil)
		}, ErrInvalid, "have[1].task_id"},
		{"stamp without origin", func() error {
			return a.s.Pull(&fanoutv1.PullRequest{NodeId: "b", Leaves: []uint32{leafX},
				Have: []*fanoutv1.KeyStamp{{TaskId: "x", Version: 1}}}, nil)
		}, ErrInvalid, "have[0].origin"},
		{"push of garbage", func() error {
			_, err := a.s.Push(&fanoutv1.PushRequest{NodeId: "b", Entries: []*fanoutv1.SyncEntry{{Event: []byte{0xff}, Origin: "b"}}})
			return err
		}, ErrInvalid, "entries[0]"},
	} {
		err := tc.call()
		if !errors.Is(err, tc.want) || !bytes.Contains([]byte(err.Error()), []byte(tc.msg)) {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.want, tc.msg)
		}
	}
	if got, _ := a.tab.Get([]byte("x")); got.Stamp.Version != 1 {
		t.Errorf("a refused request changed the table: %+v", got.Stamp)
	}
}

func TestPullIsBounded(t *testing.T) {
	a := newSide(t, "a", 0)
	a.s.serving <- struct{}{}
	a.s.serving <- struct{}{}
	err := a.s.Pull(&fanoutv1.PullRequest{NodeId: "b", Leaves: []uint32{1}}, nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("third concurrent Pull: %v, want ErrBusy", err)
	}
}
