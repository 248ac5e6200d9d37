package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/event"
	"github.com/fanout/fanout/pkg/state"
	"github.com/nats-io/nats.go"
)

// recordingApplier is a node's Apply that hands every entry to the test.
type recordingApplier struct{ got chan *fanoutv1.SyncEntry }

func (r *recordingApplier) Apply(from string, entries []*fanoutv1.SyncEntry) (int, error) {
	for _, e := range entries {
		if e.GetOrigin() != from {
			panic("the feed applies each entry from its origin")
		}
		r.got <- e
	}
	return len(entries), nil
}

// next is the next applied entry's task_id and version, within a named deadline.
func (r *recordingApplier) next(t *testing.T, what string) (string, uint64) {
	t.Helper()
	select {
	case e := <-r.got:
		h, _ := wire.ReadEvent(e.GetEvent())
		return string(h.TaskID), h.Version
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing applied within 10s", what)
		return "", 0
	}
}

// oneServerStream opens bucket's stream (R1) on a one-server cluster, with a context
// that ends within a minute, or with the test.
func oneServerStream(t *testing.T, bucket string) (context.Context, *stream) {
	t.Helper()
	nc := connect(t, startCluster(t, 1).URL(0))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	st, err := openStream(ctx, nc, testStreamConfig(bucket, 1), event.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	return ctx, st
}

// testFeed starts a feed of st into a from s, checked every 200 ms for a stall.
func testFeed(ctx context.Context, st *stream, a applier, s feedStart) (*feed, error) {
	info, err := st.s.Info(ctx)
	if err != nil {
		return nil, err
	}
	return startFeed(ctx, st, a, "self", new(hints), nil, info, s, 200*time.Millisecond)
}

// TestFeed: the feed delivers the stream's last message per key (one per key,
// however often it was written), turns ready once it applied them, then delivers
// every new write; a message this transport did not write is skipped and counted.
func TestFeed(t *testing.T) {
	ctx, st := oneServerStream(t, "feed")
	for _, w := range []struct {
		key string
		v   uint64
	}{{"a", 1}, {"b", 1}, {"a", 2}, {"c/d", 1}, {"b", 3}} {
		if _, err := st.put(ctx, testMessage(t, w.key, state.Stamp{Version: w.v, Origin: "n"}, 4), &current{}); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := st.js.KeyValue(ctx, "feed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.PutString(ctx, "foreign", "not an event"); err != nil {
		t.Fatal(err)
	}

	rec := &recordingApplier{got: make(chan *fanoutv1.SyncEntry, 16)}
	f, err := testFeed(ctx, st, rec, feedStart{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	snapshot := map[string]uint64{}
	for range 3 {
		id, v := rec.next(t, "the snapshot")
		snapshot[id] = v
	}
	if want := map[string]uint64{"a": 2, "b": 3, "c/d": 1}; len(snapshot) != 3 || snapshot["a"] != 2 || snapshot["b"] != 3 || snapshot["c/d"] != 1 {
		t.Fatalf("snapshot %v, want %v", snapshot, want)
	}
	select {
	case <-f.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("not ready within 10s of applying the snapshot")
	}
	if f.foreign.Load() != 1 {
		t.Fatalf("foreign %d, want 1", f.foreign.Load())
	}

	if _, err := st.put(ctx, testMessage(t, "a", state.Stamp{Version: 9, Origin: "m"}, 4), &current{}); err != nil {
		t.Fatal(err)
	}
	if id, v := rec.next(t, "a new write"); id != "a" || v != 9 {
		t.Fatalf("after the snapshot: %s@%d, want a@9", id, v)
	}
	if f.lag.Load() != 0 {
		t.Fatalf("lag %d after the last message", f.lag.Load())
	}
}

// TestFeedEmptyStream: on an empty stream the feed is ready at once.
func TestFeedEmptyStream(t *testing.T) {
	ctx, st := oneServerStream(t, "empty")
	f, err := testFeed(ctx, st, &recordingApplier{got: make(chan *fanoutv1.SyncEntry, 1)}, feedStart{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	select {
	case <-f.ready:
	default:
		t.Fatal("an empty stream's feed is not ready at once")
	}
}

// TestFeedResumes: a feed started from a saved sequence delivers the messages from
// it on, and none before; one started past the stream's last message is ready at once.
func TestFeedResumes(t *testing.T) {
	ctx, st := oneServerStream(t, "resume")
	var seqs []uint64
	for i, key := range []string{"a", "b", "c", "d"} {
		o, err := st.put(ctx, testMessage(t, key, state.Stamp{Version: uint64(i + 1), Origin: "n"}, 4), &current{})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, o.seq)
	}
	rec := &recordingApplier{got: make(chan *fanoutv1.SyncEntry, 16)}
	f, err := testFeed(ctx, st, rec, feedStart{from: seqs[2], since: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	for _, want := range []string{"c", "d"} {
		if id, _ := rec.next(t, "resumed"); id != want {
			t.Fatalf("resumed from %d: got %s, want %s", seqs[2], id, want)
		}
	}
	select {
	case <-f.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("not ready within 10s of applying the stream's last message")
	}
	select {
	case e := <-rec.got:
		t.Fatalf("resumed: an extra entry %v", e)
	case <-time.After(300 * time.Millisecond):
	}

	past, err := testFeed(ctx, st, &recordingApplier{got: make(chan *fanoutv1.SyncEntry, 1)}, feedStart{from: seqs[3] + 1, since: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	defer past.stop()
	select {
	case <-past.ready:
	default:
		t.Fatal("a feed resumed past the stream's last message is not ready at once")
	}
}

// TestFeedRestartsStalledConsumer: a consumer that stops delivering (paused on the
// server, as one on a server whose partition healed was seen to) while the stream
// moves on is replaced from the feed's position within a few checks, and the feed
// delivers what it missed, once.
func TestFeedRestartsStalledConsumer(t *testing.T) {
	ctx, st := oneServerStream(t, "stall")
	if _, err := st.put(ctx, testMessage(t, "a", state.Stamp{Version: 1, Origin: "n"}, 4), &current{}); err != nil {
		t.Fatal(err)
	}
	rec := &recordingApplier{got: make(chan *fanoutv1.SyncEntry, 16)}
	f, err := testFeed(ctx, st, rec, feedStart{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	if id, _ := rec.next(t, "the snapshot"); id != "a" {
		t.Fatalf("snapshot: %s, want a", id)
	}
	names := st.s.ConsumerNames(ctx)
	var paused int
	for name := range names.Name() {
		if _, err := st.s.PauseConsumer(ctx, name, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		paused++
	}
	if err := names.Err(); err != nil || paused != 1 {
		t.Fatalf("paused %d consumers (%v), want the feed's one", paused, err)
	}
	for i, key := range []string{"b", "c"} {
		if _, err := st.put(ctx, testMessage(t, key, state.Stamp{Version: uint64(i + 2), Origin: "n"}, 4), &current{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"b", "c"} {
		if id, _ := rec.next(t, "after the stall"); id != want {
			t.Fatalf("after the stall: %s, want %s", id, want)
		}
	}
	if f.resets.Load() == 0 {
		t.Fatal("the stalled consumer was not replaced (resets 0), yet the messages came")
	}
	select {
	case e := <-rec.got:
		t.Fatalf("after the restart: an extra entry %v", e)
	case <-time.After(500 * time.Millisecond):
	}
}

// TestReconnectStormLeavesNoConsumers: twenty reconnects of a node's connection in a
// row leave the stream with the feed's one consumer (the ones the client replaced
// are deleted, or expire after feedInactive), and the feed still delivers.
func TestReconnectStormLeavesNoConsumers(t *testing.T) {
	url := startCluster(t, 1).URL(0)
	a := startMemberOpts(t, url, "a", "storm", 1, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	b := startMember(t, url, "b", "storm", 1)
	a.waitReady(t)
	b.waitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		if err := a.tr.nc.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 10*time.Second, fmt.Sprintf("reconnect %d", i+1), a.tr.nc.IsConnected)
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := submit(ctx, b, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: "after", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	a.waitWithin(t, 20*time.Second, "a write after the storm", func() bool { _, ok := a.stamp("after"); return ok })
	st := a.tr.st.Load()
	start := time.Now()
	waitUntil(t, feedInactive+10*time.Second, "the stream down to the two nodes' consumers", func() bool {
		info, err := st.s.Info(ctx)
		return err == nil && info.State.Consumers == 2
	})
	t.Logf("consumers back to 2 within %s of the storm's end", time.Since(start).Round(100*time.Millisecond))
}
