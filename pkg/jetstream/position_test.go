package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/store"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPositionEncoding: a position reads back as written; anything else is refused
// with what is wrong.
func TestPositionEncoding(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	p := position{Stream: "KV_fanout", Created: now.Add(-time.Hour), Seq: 42, Since: now, Unpublished: now.Add(-time.Minute)}
	b, err := encodePosition(p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodePosition(b)
	p.Version = positionVersion
	if err != nil || !got.Created.Equal(p.Created) || !got.Since.Equal(p.Since) || !got.Unpublished.Equal(p.Unpublished) ||
		got.Stream != p.Stream || got.Seq != p.Seq || got.Version != p.Version {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", p, got, err)
	}
	for _, bad := range []struct{ in, want string }{
		{`{"v":2,"stream":"KV_a"}`, "version 2"},
		{`{"v":1,"stream":""}`, "stream"},
		{`{"v":1,"stream":"KV_a","seq":5}`, "without its time"},
		{`{"v":1,"stream":"KV_a","extra":1}`, "unknown field"},
		{`{"v":1,"stream":"KV_a"} {}`, "after the position"},
		{`not json`, "saved position"},
	} {
		if _, err := decodePosition([]byte(bad.in)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("decodePosition(%s) = %v, want an error saying %q", bad.in, err, bad.want)
		}
	}
}

// FuzzDecodePosition: decodePosition never panics, and what it accepts encodes to
// a position it reads back the same.
func FuzzDecodePosition(f *testing.F) {
	b, _ := encodePosition(position{Stream: "KV_x", Seq: 3, Since: time.Unix(5, 0)})
	f.Add(b)
	f.Add([]byte(`{"v":1,"stream":"KV_a"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePosition(b)
		if err != nil {
			return
		}
		again, err := encodePosition(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := decodePosition(again)
		if err != nil || q.Seq != p.Seq || q.Stream != p.Stream || !q.Since.Equal(p.Since) || !q.Created.Equal(p.Created) {
			t.Fatalf("%s: read back as %+v, %v; want %+v", again, q, err, p)
		}
	})
}

// TestResumeFrom: the feed resumes after a saved sequence of the same stream while
// no delete marker after it can have been purged, and takes the snapshot otherwise.
func TestResumeFrom(t *testing.T) {
	now := time.Now()
	cfg := DefaultConfig()
	cfg.TombstoneTTL, cfg.Now = time.Hour, func() time.Time { return now }
	tr := &Transport{cfg: cfg}
	created := now.Add(-48 * time.Hour)
	info := &jetstream.StreamInfo{Config: jetstream.StreamConfig{Name: "KV_x"}, Created: created, State: jetstream.StreamState{LastSeq: 100}}
	saved := position{Stream: "KV_x", Created: created, Seq: 90, Since: now.Add(-10 * time.Minute)}
	for _, c := range []struct {
		name string
		p    position
		ok   bool
		from uint64
	}{
		{"no position", position{}, false, 0},
		{"resumes", saved, true, 91},
		{"at the last message", func() position { p := saved; p.Seq = 100; return p }(), true, 101},
		{"another stream", func() position { p := saved; p.Stream = "KV_y"; return p }(), true, 0},
		{"made again", func() position { p := saved; p.Created = created.Add(time.Second); return p }(), true, 0},
		{"past the last message", func() position { p := saved; p.Seq = 101; return p }(), true, 0},
		{"markers may be purged", func() position { p := saved; p.Since = now.Add(-time.Hour); return p }(), true, 0},
	} {
		if got := tr.resumeFrom(c.p, c.ok, info); got.from != c.from {
			t.Errorf("%s: from %d, want %d", c.name, got.from, c.from)
		}
	}
}

// openStore opens a data dir's store, closed when the test ends unless closed before.
func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, store.Config{MinFreeBytes: 0})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// withDataDir gives a member the data dir's store: the node's and the transport's
// position.
func withDataDir(s *store.Store) func(*Config, *fanout.Config) {
	return func(c *Config, n *fanout.Config) {
		c.Checkpoint, n.Store = s, s
	}
}

// TestRestartResumes: a node restarted on its data dir resumes the stream after the
// sequence it saved, reading only what was written while it was down, and ends
// with every key.
func TestRestartResumes(t *testing.T) {
	url := startCluster(t, 1).URL(0)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := openStore(t, dir)
	a := startMemberWith(t, url, "a", "resume", 1, withDataDir(st))
	b := startMember(t, url, "b", "resume", 1)
	a.waitReady(t)
	b.waitReady(t)
	for i := range 5 {
		if _, err := submit(ctx, b, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: fmt.Sprintf("k/%d", i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	a.waitFor(t, "b's five keys", func() bool { _, ok := a.stamp("k/4"); return ok })
	// The feed moves its position just after it applied a message: wait for it to be
	// past the stream's last one, as the table already is.
	info, err := a.tr.st.Load().s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	waitUntil(t, 10*time.Second, "a's feed past the last message", func() bool { return a.tr.fd.Load().applied.Load() >= last })
	waitUntil(t, 10*time.Second, "a saves its position", func() bool { return a.tr.savedSeq.Load() >= last })
	a.node.Close()
	st.Close()

	for i := 5; i < 8; i++ {
		if _, err := submit(ctx, b, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: fmt.Sprintf("k/%d", i), Payload: []byte("y")}); err != nil {
			t.Fatal(err)
		}
	}
	st = openStore(t, dir)
	defer st.Close()
	a = startMemberWith(t, url, "a", "resume", 1, withDataDir(st))
	a.waitReady(t)
	a.waitFor(t, "every key", func() bool {
		for i := range 8 {
			if _, ok := a.stamp(fmt.Sprintf("k/%d", i)); !ok {
				return false
			}
		}
		return true
	})
	fd := a.tr.fd.Load()
	if !fd.resumed || fd.handledN.Load() != 3 {
		t.Fatalf("restarted: resumed %t, handled %d messages; want resumed, the 3 written while down", fd.resumed, fd.handledN.Load())
	}
}

// TestRestartPublishesOutbox: events accepted with ack QUEUED while the stream could
// not be reached are in the data dir, not in the stream, when the node stops; the
// node restarted on its data dir publishes them, and another node gets them.
func TestRestartPublishesOutbox(t *testing.T) {
	c := startCluster(t, 1)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := openStore(t, dir)
	a := startMemberWith(t, c.URL(0), "a", "outbox", 1, withDataDir(st))
	a.waitReady(t)
	// A position saved before the events below: its outbox mark is older than they are.
	waitUntil(t, 10*time.Second, "a's first save", func() bool { return a.tr.saves.Load() > 0 })
	c.Stop(0)
	for i := range 3 {
		resp, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUEUED, &fanoutv1.Event{TaskId: fmt.Sprintf("q/%d", i), Payload: []byte("z")})
		if err != nil || resp.GetResults()[0].GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
			t.Fatalf("QUEUED submit with the server down: %v, %v", resp, err)
		}
	}
	a.node.Close()
	st.Close()

	c.Start(0)
	st = openStore(t, dir)
	defer st.Close()
	a = startMemberWith(t, c.URL(0), "a", "outbox", 1, withDataDir(st))
	b := startMember(t, c.URL(0), "b", "outbox", 1)
	a.waitReady(t)
	b.waitWithin(t, 30*time.Second, "a's three events, published after its restart", func() bool {
		for i := range 3 {
			if _, ok := b.stamp(fmt.Sprintf("q/%d", i)); !ok {
				return false
			}
		}
		return true
	})
	if n := a.tr.republished.Load(); n < 3 {
		t.Fatalf("republished %d events at the restart, want at least 3", n)
	}
}

// TestMarkersPurged: a delete marker leaves the stream after the tombstone TTL, by
// the server's per-message TTL or by the sidecar's purge on a server without them;
// a newer write of a deleted key is never purged.
func TestMarkersPurged(t *testing.T) {
	url := startCluster(t, 1).URL(0)
	for _, serverTTL := range []bool{true, false} {
		t.Run(fmt.Sprintf("serverTTL=%t", serverTTL), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			bucket := fmt.Sprintf("purge%t", serverTTL)
			a := startMemberWith(t, url, "a", bucket, 1, func(c *Config, _ *fanout.Config) {
				c.TombstoneTTL, c.noMsgTTL = 2*time.Second, !serverTTL
			})
			a.waitReady(t)
			st := a.tr.st.Load()
			if st.msgTTL != serverTTL {
				t.Fatalf("the stream's per-message TTLs: %t, want %t", st.msgTTL, serverTTL)
			}
			for _, ev := range []*fanoutv1.Event{
				{TaskId: "gone", Payload: []byte("1")}, {TaskId: "gone", Deleted: true},
				{TaskId: "back", Payload: []byte("1")}, {TaskId: "back", Deleted: true},
			} {
				if _, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, ev); err != nil {
					t.Fatal(err)
				}
			}
			// The marker of "back" is replaced by a newer write before its TTL.
			if _, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: "back", Payload: []byte("2")}); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, 20*time.Second, "the marker of gone purged", func() bool {
				_, err := st.s.GetLastMsgForSubject(ctx, st.prefix+"gone")
				return errors.Is(err, jetstream.ErrMsgNotFound)
			})
			time.Sleep(purgeEvery(2 * time.Second)) // a purge round more
			if _, err := st.s.GetLastMsgForSubject(ctx, st.prefix+"back"); err != nil {
				t.Fatalf("the newer write of back: %v", err)
			}
		})
	}
}

// waitUntil polls cond every 20 ms until it holds, or fails the test after within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
