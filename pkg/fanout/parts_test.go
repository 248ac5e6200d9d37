package fanout

import (
	"context"
	"fmt"
	"google.golang.org/protobuf/proto"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
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

// get returns the stamp held for taskID (tests only).
func (t *versionTable) get(taskID string) (stamp, bool) {
	sh, h := t.locate(bytesOf(taskID))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.peek(h, taskID)
}

// peek returns the stamp of taskID without touching recency. Caller holds mu.
func (sh *versionShard) peek(h uint64, taskID string) (stamp, bool) {
	if n := sh.find(h, bytesOf(taskID)); n != nil {
		return n.s, true
	}
	return stamp{}, false
}

// admitString is admit for a task_id held as a string, with a put that only says
// whether it took the event (tests and benchmarks).
func (t *versionTable) admitString(taskID string, s stamp, put func() bool) admitResult {
	return t.admit(bytesOf(taskID), s, func() (string, bool) { return taskID, put() })
}

func TestStampOrder(t *testing.T) {
	cases := []struct {
		a, b stamp
		want bool
	}{
		{stamp{2, "a"}, stamp{1, "z"}, true},
		{stamp{1, "z"}, stamp{2, "a"}, false},
		{stamp{1, "b"}, stamp{1, "a"}, true},
		{stamp{1, "a"}, stamp{1, "a"}, false},
	}
	for _, c := range cases {
		if got := c.a.newerThan(c.b); got != c.want {
			t.Errorf("%v newerThan %v = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestVersionTableBoundedLRU(t *testing.T) {
	vt := newVersionTable(versionShards * 2) // two task_ids per shard
	for i := range 1000 {
		vt.record(fmt.Sprintf("t%d", i), stamp{1, "a"})
	}
	total := 0
	for i := range vt.shards {
		total += vt.shards[i].n
	}
	if total > versionShards*2 {
		t.Fatalf("table holds %d task_ids, bound is %d", total, versionShards*2)
	}
	if _, ok := vt.get("t999"); !ok {
		t.Fatal("most recent task_id was evicted")
	}
	vt.record("t999", stamp{0, "z"}) // older: ignored
	if s, _ := vt.get("t999"); s != (stamp{1, "a"}) {
		t.Fatalf("older record replaced newer: %v", s)
	}
}

// TestVersionShardLRU checks the recency list against a naive model: the least
// recently set task_id is the one evicted, and the list, the hash chains and the count
// always agree. The hashes collide on purpose (two values for six task_ids), so chains
// are built, walked and unlinked from every position.
func TestVersionShardLRU(t *testing.T) {
	sh := &versionShard{max: 3, byHash: map[uint64]*versionNode{}}
	hashOf := func(id string) uint64 { return uint64(id[len(id)-1]) % 2 }
	var model []string // most recent first
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 5000 {
		id := fmt.Sprintf("k%d", rng.IntN(6))
		h := hashOf(id)
		sh.store(sh.find(h, bytesOf(id)), h, id, stamp{version: uint64(step)})
		model = slices.DeleteFunc(model, func(m string) bool { return m == id })
		model = append([]string{id}, model...)
		if len(model) > 3 {
			model = model[:3]
		}
		var got []string
		for n := sh.head; n != nil; n = n.next {
			got = append(got, n.taskID)
			if sh.find(hashOf(n.taskID), bytesOf(n.taskID)) != n || n.hash != hashOf(n.taskID) {
				t.Fatalf("step %d: list node %s not found through its hash chain", step, n.taskID)
			}
		}
		chained := 0
		for _, first := range sh.byHash {
			for n := first; n != nil; n = n.same {
				chained++
			}
		}
		if !slices.Equal(got, model) || sh.n != len(model) || chained != len(model) {
			t.Fatalf("step %d: list %v (count %d, chained %d), want %v", step, got, sh.n, chained, model)
		}
		if s, ok := sh.peek(h, id); !ok || s.version != uint64(step) {
			t.Fatalf("step %d: peek(%s) = %v %v", step, id, s, ok)
		}
	}
}

func TestVersionTableAdmit(t *testing.T) {
	vt := newVersionTable(100)
	accept := func() bool { return true }
	refuse := func() bool { return false }
	if r := vt.admitString("k", stamp{5, "a"}, refuse); r != busy {
		t.Fatalf("refused put: %v, want busy", r)
	}
	if _, ok := vt.get("k"); ok {
		t.Fatal("busy admit recorded the version")
	}
	if r := vt.admitString("k", stamp{5, "a"}, accept); r != admitted {
		t.Fatalf("%v, want admitted", r)
	}
	called := false
	if r := vt.admitString("k", stamp{5, "a"}, func() bool { called = true; return true }); r != stale || called {
		t.Fatalf("duplicate: %v (put called %v), want stale without put", r, called)
	}
}

func delivery1(id string, v uint64) delivery {
	return deliveryOf(&fanoutv1.Event{TaskId: id, Version: v}, "o")
}

func TestInboxCoalescesInPlaceAndBounds(t *testing.T) {
	in := newInbox(3)
	for _, d := range []delivery{delivery1("a", 1), delivery1("b", 1), delivery1("a", 2), delivery1("c", 1)} {
		if !in.put(d) {
			t.Fatalf("put %s refused below capacity", d.taskID)
		}
	}
	if in.put(delivery1("d", 1)) {
		t.Fatal("new task_id accepted into a full inbox")
	}
	if !in.put(delivery1("b", 2)) {
		t.Fatal("replacement refused in a full inbox; it takes no room")
	}
	if in.len() != 3 {
		t.Fatalf("len = %d, want 3", in.len())
	}
	if got, _ := in.pop(); got != nil {
		t.Fatal("pop with no subscriber took events; they must wait")
	}
	_, cancel := in.subscribe("", nil)
	defer cancel()
	got, subs := in.pop()
	var order []string
	for _, d := range got {
		order = append(order, fmt.Sprintf("%s@%d", d.taskID, d.version))
	}
	if strings.Join(order, " ") != "a@2 b@2 c@1" || len(subs) != 1 {
		t.Fatalf("order %v subs %d; want a@2 b@2 c@1 (replaced in place), 1 subscriber", order, len(subs))
	}
}

func TestInboxPumpFansOutByPrefix(t *testing.T) {
	in := newInbox(100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	all, c1 := in.subscribe("", nil)
	defer c1()
	orders, c2 := in.subscribe("orders/", nil)
	defer c2()
	in.put(delivery1("users/1", 1))
	in.put(delivery1("orders/1", 1))
	want := map[*subscriber][]string{all: {"users/1", "orders/1"}, orders: {"orders/1"}}
	for s, ids := range want {
		for _, id := range ids {
			select {
			case d := <-s.ch:
				if d.taskID != id {
					t.Fatalf("prefix %q got %s, want %s", s.prefix, d.taskID, id)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("prefix %q: nothing delivered", s.prefix)
			}
		}
	}
}

func TestValidateSubmit(t *testing.T) {
	l := DefaultLimits()
	l.MaxEventBytes = 10
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
			err := l.validateSubmit(c.req)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("rejected valid request: %v", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
				t.Fatalf("err = %v, want prefix %q", err, c.want)
			}
		})
	}
}

func TestMaxMessageBytesFitsLimits(t *testing.T) {
	l := DefaultLimits()
	if got := l.MaxMessageBytes(250); got < 250*(l.MaxEventBytes+l.MaxAttributeBytes) {
		t.Fatalf("MaxMessageBytes(250) = %d: a full batch of maximal events would not fit", got)
	}
	if got := l.MaxMessageBytes(l.MaxEvents); got != 1<<30 {
		t.Fatalf("MaxMessageBytes(max) = %d, want the 1 GiB cap", got)
	}
}

// TestInboxReclaimsWhatAStreamDidNotSend: events a stream held when it went away are
// delivered, in order, to the next subscriber; a copy another stream also got is not
// put back, and neither is an event whose task has a newer one waiting.
func TestInboxReclaimsWhatAStreamDidNotSend(t *testing.T) {
	in := newInbox(100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	gone := make(chan struct{})
	old, leave := in.subscribe("", gone)
	for i := range 5 {
		in.put(delivery1(fmt.Sprintf("t%d", i), 1))
	}
	// The stream takes t0, fails to send it, and goes away holding t1..t4 in its buffer.
	var first delivery
	select {
	case first = <-old.ch:
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered")
	}
	waitFor(t, "all five handed to the stream", func() bool { return in.len() == 0 && len(old.ch) == 4 })
	in.put(delivery1("t3", 2)) // a newer t3 is waiting: the old t3 must not come back
	close(gone)
	leave(first)

	next, leave2 := in.subscribe("", nil)
	defer leave2()
	var got []string
	for len(got) < 5 {
		select {
		case d := <-next.ch:
			got = append(got, fmt.Sprintf("%s@%d", d.taskID, d.version))
		case <-time.After(5 * time.Second):
			t.Fatalf("next subscriber got only %v", got)
		}
	}
	if want := "t0@1 t1@1 t2@1 t4@1 t3@2"; strings.Join(got, " ") != want {
		t.Fatalf("next subscriber got %v, want %s", got, want)
	}
}

func TestInboxDoesNotReclaimSharedCopies(t *testing.T) {
	in := newInbox(100)
	shared := delivery1("a", 1)
	shared.shared = true
	in.requeue([]delivery{shared, delivery1("b", 1)})
	if in.len() != 1 {
		t.Fatalf("len = %d, want only the unshared event put back", in.len())
	}
}

// deliveryOf is ev as the receive path holds it: its bytes and what the node reads.
func deliveryOf(ev *fanoutv1.Event, origin string) delivery {
	b, err := proto.Marshal(ev)
	if err != nil {
		panic(err)
	}
	h, ok := DefaultLimits().readEvent(b)
	if !ok {
		panic(fmt.Sprintf("invalid test event %v", ev))
	}
	d := delivery{version: h.version, origin: origin}
	d.raw, d.taskID = ownEvent(b, h)
	return d
}
