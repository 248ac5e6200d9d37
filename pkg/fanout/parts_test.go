package fanout

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestHLC(t *testing.T) {
	wall := time.UnixMilli(1_000_000)
	c := hlc{now: func() time.Time { return wall }}
	base := uint64(1_000_000) << logicalBits

	if v := c.reserve(3); v != base {
		t.Fatalf("first reserve = %d, want the wall version %d", v, base)
	}
	if v := c.reserve(1); v != base+3 {
		t.Fatalf("same millisecond: %d, want logical counter %d", v, base+3)
	}
	wall = wall.Add(-time.Hour) // the wall clock steps back
	if v := c.reserve(1); v != base+4 {
		t.Fatalf("clock stepped back: %d, want still monotonic %d", v, base+4)
	}
	wall = wall.Add(2 * time.Hour)
	if v := c.reserve(1); v != uint64(wall.UnixMilli())<<logicalBits {
		t.Fatalf("clock moved on: %d, want wall version", v)
	}
	ahead := wallVersion(wall.Add(30 * time.Second))
	c.observe(ahead)
	if v := c.reserve(1); v != ahead+1 {
		t.Fatalf("after observing a peer 30s ahead: %d, want %d", v, ahead+1)
	}
	c.observe(wallVersion(wall.Add(2 * time.Hour))) // beyond maxObservedSkew: ignored
	if v := c.reserve(1); v != ahead+2 {
		t.Fatalf("a far-future version moved the clock: %d", v)
	}
	c.observe(7) // an app's small counter: no effect
	if v := c.reserve(1); v != ahead+3 {
		t.Fatalf("small version moved the clock: %d", v)
	}
}

func TestHLCConcurrentUnique(t *testing.T) {
	c := hlc{now: time.Now}
	const goroutines, per = 8, 1000
	seen := make([][]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				seen[g] = append(seen[g], c.reserve(1))
			}
		}()
	}
	wg.Wait()
	all := map[uint64]bool{}
	for _, s := range seen {
		for i, v := range s {
			if all[v] {
				t.Fatalf("version %d handed out twice", v)
			}
			if i > 0 && v <= s[i-1] {
				t.Fatalf("not monotonic within a goroutine: %d after %d", v, s[i-1])
			}
			all[v] = true
		}
	}
}

// bloated gives ev an unknown field 99 of n bytes, as a newer or a hostile client
// would send it.
func bloated(ev *fanoutv1.Event, n int) *fanoutv1.Event {
	ev.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, n)))
	return ev
}

// bloatedTTL is a ttl of one second with an unknown field of n bytes.
func bloatedTTL(n int) *durationpb.Duration {
	d := durationpb.New(time.Second)
	d.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, n)))
	return d
}

// nodeWithLimits is a node without peers that holds requests to l.
func nodeWithLimits(t *testing.T, l Limits) *Node {
	t.Helper()
	cfg := testConfig("v")
	cfg.Limits = l
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// TestValidateSubmit: each rule of the request reader (event.Limits.ReadSubmit), with
// its message, from Submit with a decoded request, and the same message from the app
// listener's reader (readSubmit, with the request's bytes).
func TestValidateSubmit(t *testing.T) {
	l := DefaultLimits()
	l.MaxEventBytes = 10
	n := nodeWithLimits(t, l)
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprint(i)] = ""
	}
	cases := []struct {
		name string
		req  *fanoutv1.SubmitRequest
		want string // "" means valid
	}{
		{"empty request is valid", &fanoutv1.SubmitRequest{}, ""},
		{"valid event", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Payload: []byte("0123456789"), Ttl: durationpb.New(time.Second)}}}, ""},
		{"empty task_id", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "ok"}, {}}}, "events[1].task_id: empty"},
		{"long task_id", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: strings.Repeat("x", 1025)}}}, "events[0].task_id: 1025 bytes"},
		{"null event", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{nil}}, "events[0]: null event"},
		{"payload too big", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Payload: make([]byte, 11)}}}, "events[0].payload: 11 bytes, at most 10"},
		{"too many attributes", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Attributes: many}}}, "events[0].attributes: 65 entries"},
		{"attributes too big", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Attributes: map[string]string{"k": strings.Repeat("v", 16<<10)}}}}, "events[0].attributes: 16385 bytes"},
		{"negative ttl", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Ttl: durationpb.New(-time.Second)}}}, "events[0].ttl: negative"},
		{"malformed ttl", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Ttl: &durationpb.Duration{Seconds: 1, Nanos: -1}}}}, "events[0].ttl"},
		{"negative ack_timeout", &fanoutv1.SubmitRequest{AckTimeout: durationpb.New(-time.Second)}, "ack_timeout: negative"},
		{"unknown ack policy", &fanoutv1.SubmitRequest{Ack: 99}, "ack: unknown policy 99"},
		{"too many events", &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, 10001)}, "events: 10001 events, at most 10000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := n.Submit(context.Background(), c.req)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("rejected valid request: %v", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("err = %v, want prefix %q", err, c.want)
			}
			if slices.Contains(c.req.Events, nil) {
				return // no bytes say "null": encoded, it is an empty event
			}
			b, merr := proto.Marshal(c.req)
			if merr != nil {
				t.Fatal(merr)
			}
			if rerr := n.readSubmit(b, n.getCall()); fmt.Sprint(rerr) != fmt.Sprint(err) {
				t.Fatalf("readSubmit: %v; Submit: %v", rerr, err)
			}
		})
	}
}

// TestSubmitSizeAsSent: an event is held to EventBytes as it will be stored, the bytes
// the app sent and the version the node appends: unknown fields count, in the event
// and in its ttl, and an event that brings its own version leaves no room for one.
func TestSubmitSizeAsSent(t *testing.T) {
	l := DefaultLimits()
	l.MaxEventBytes = 10
	n := nodeWithLimits(t, l)
	cases := []struct {
		name string
		req  *fanoutv1.SubmitRequest
		want string // "" means valid
	}{
		{"a few unknown fields are fine (a newer client)", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{bloated(&fanoutv1.Event{TaskId: "k"}, 100)}}, ""},
		{"unknown fields count toward the event's bytes", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "ok"}, bloated(&fanoutv1.Event{TaskId: "k"}, l.EventBytes())}},
			// task_id 3, the unknown field's tag 2 and length 3, and 11 for the version to come
			"events[1]: " + fmt.Sprint(3+2+3+l.EventBytes()+11) + " bytes as sent, with the version the sidecar adds; at most " + fmt.Sprint(l.EventBytes())},
		{"a ttl's unknown fields count too", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "k", Ttl: bloatedTTL(l.EventBytes())}}}, "events[0]: "},
		{"a version given leaves room for no assigned one", &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{bloated(&fanoutv1.Event{TaskId: "k", Version: 1}, l.EventBytes()-3-2-4-11)}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := proto.Marshal(c.req)
			if err != nil {
				t.Fatal(err)
			}
			err = n.readSubmit(b, n.getCall())
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("rejected valid request: %v", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("err = %v, want prefix %q", err, c.want)
			}
		})
	}
	// The same task_id sent twice: protobuf keeps the last, the bytes keep both.
	ev := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), strings.Repeat("x", 1000))
	ev = append(ev, ev...)
	big := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), bytes.Repeat(ev, 1+l.EventBytes()/len(ev)))
	if err := n.readSubmit(big, n.getCall()); err == nil || !strings.Contains(err.Error(), "fields sent twice, count too") {
		t.Fatalf("a task_id repeated past EventBytes: %v", err)
	}
}

// TestPeerMessageBytes: the peer listener takes a full batch plus one maximal event,
// and an anti-entropy message plus one.
func TestPeerMessageBytes(t *testing.T) {
	cfg := DefaultConfig()
	item := replicateItemBytes(cfg.Limits.EventBytes())
	if got, want := cfg.PeerMessageBytes(), cfg.Batcher.MaxBatchBytes+item+messageOverhead; got != want {
		t.Errorf("PeerMessageBytes = %d, want %d", got, want)
	}
	cfg.SyncMessageBytes = 8 << 20
	if got, want := cfg.PeerMessageBytes(), 8<<20+item+messageOverhead; got != want {
		t.Errorf("with an 8 MiB sync message: %d, want %d", got, want)
	}
	if def := DefaultConfig(); def.PeerMessageBytes() > 6<<20 {
		t.Errorf("default PeerMessageBytes = %d, want about 5 MiB", def.PeerMessageBytes())
	}
}

// TestOutArena: each event gets a buffer of its own holding its bytes and, without a
// version, the version next+i; a buffer's capacity is its length, so no append can
// reach a neighbour; small events share chunks, a big one has its own buffer.
func TestOutArena(t *testing.T) {
	var a outArena
	small, _ := proto.Marshal(&fanoutv1.Event{TaskId: "s", Payload: []byte("x")})
	versioned, _ := proto.Marshal(&fanoutv1.Event{TaskId: "v", Version: 9})
	big, _ := proto.Marshal(&fanoutv1.Event{TaskId: "b", Payload: make([]byte, arenaMax)})
	events := [][]byte{small, versioned, big, small}
	heads := make([]wire.EventHead, len(events))
	for i, e := range events {
		h, ok := wire.ReadEvent(e)
		if !ok {
			t.Fatal("unreadable event")
		}
		heads[i] = h
	}
	var bufs [][]byte
	for round := range arenaChunk / len(small) * 2 { // past several chunks
		bufs = a.copyEvents(bufs[:0], events, heads, 100)
		for i, buf := range bufs {
			if len(buf) != cap(buf) {
				t.Fatalf("round %d event %d: len %d cap %d", round, i, len(buf), cap(buf))
			}
			var ev fanoutv1.Event
			if err := proto.Unmarshal(buf, &ev); err != nil {
				t.Fatal(err)
			}
			want := uint64(100 + i)
			if heads[i].Version != 0 {
				want = heads[i].Version
			}
			if ev.Version != want || !bytes.HasPrefix(buf, events[i]) {
				t.Fatalf("round %d event %d: version %d, want %d; prefix kept %v", round, i, ev.Version, want, bytes.HasPrefix(buf, events[i]))
			}
		}
		if &bufs[0][0] == &bufs[3][0] {
			t.Fatal("two events share a buffer")
		}
	}
}
