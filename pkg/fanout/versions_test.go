package fanout

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// TestVersionBands checks the version rule of hlc.go at one instant: every scheme an
// app may use is accepted, up to its own scale's bound, and nothing else is.
func TestVersionBands(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	b := newVersionBound(now, time.Minute)
	ok := map[string]uint64{
		"counter 1":                         1,
		"counter 2^40":                      1 << 40,
		"Unix seconds":                      uint64(now.Unix()),
		"Unix milliseconds, a year ahead":   uint64(now.AddDate(1, 0, 0).UnixMilli()),
		"Unix microseconds, a year ahead":   uint64(now.AddDate(1, 0, 0).UnixMicro()),
		"the sidecar's own version, now":    wallVersion(now),
		"the sidecar's own version, +59s":   wallVersion(now.Add(59 * time.Second)),
		"the top of the clock's bound":      maxVersion(now, time.Minute),
		"Unix nanoseconds, now":             uint64(now.UnixNano()),
		"Unix nanoseconds, +59s":            uint64(now.Add(59 * time.Second).UnixNano()),
		"Unix nanoseconds, a year ago":      uint64(now.AddDate(-1, 0, 0).UnixNano()),
		"Unix nanoseconds, 2000-01-01":      nanosBand,
		"Unix nanoseconds, the exact bound": uint64(now.Add(time.Minute).UnixNano()),
	}
	for name, v := range ok {
		if !b.allows(v) {
			t.Errorf("%s (%d): refused, want accepted", name, v)
		}
	}
	refused := map[string]uint64{
		"0":                                     0,
		"the sidecar's scale, 2 minutes ahead":  wallVersion(now.Add(2 * time.Minute)),
		"the sidecar's scale, a day ahead":      wallVersion(now.Add(24 * time.Hour)),
		"just below the nanosecond band":        nanosBand - 1,
		"Unix nanoseconds, 1 ns past the bound": uint64(now.Add(time.Minute).UnixNano()) + 1,
		"Unix nanoseconds, an hour ahead":       uint64(now.Add(time.Hour).UnixNano()),
		"2^64-1":                                math.MaxUint64,
	}
	for name, v := range refused {
		if b.allows(v) {
			t.Errorf("%s (%d): accepted, want refused", name, v)
		}
		if msg := b.explain(v, time.Minute); !strings.Contains(msg, "ahead") && v != 0 {
			t.Errorf("%s: explanation %q says nothing of the bound", name, msg)
		}
	}
	// The bands stay apart until the sidecar's versions reach 2000-01-01 in nanoseconds.
	if v := wallVersion(time.Date(2427, 1, 1, 0, 0, 0, 0, time.UTC)); v >= nanosBand {
		t.Errorf("the sidecar's versions of 2427 (%d) reach the nanosecond band (%d)", v, nanosBand)
	}
	if v := wallVersion(time.Date(2428, 1, 1, 0, 0, 0, 0, time.UTC)); v < nanosBand {
		t.Errorf("the bands' limit moved: the sidecar's versions of 2428 (%d) are below %d; update hlc.go's comment", v, nanosBand)
	}
}

// TestVersionSchemes runs each scheme through the node: a Submit with app versions of
// every scheme is accepted and leaves the clock where it was (nanoseconds do not drag
// it), peers and anti-entropy take the same versions, and far-future versions are
// refused and counted on each path.
func TestVersionSchemes(t *testing.T) {
	tn := startTestNode(t, testConfig("r"))
	n := tn.node
	ctx := context.Background()
	now := time.Now()
	nanos := uint64(now.UnixNano())
	events := []*fanoutv1.Event{
		{TaskId: "counter", Version: 7},
		{TaskId: "micros", Version: uint64(now.UnixMicro())},
		{TaskId: "nanos", Version: nanos},
		{TaskId: "sidecar"},
	}
	resp, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: events})
	if err != nil {
		t.Fatalf("Submit of every scheme: %v", err)
	}
	for i, r := range resp.GetResults() {
		if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
			t.Fatalf("events[%d] (%s): %v, want ACCEPTED", i, events[i].GetTaskId(), r)
		}
	}
	if v := resp.GetVersions()[3]; v >= wallVersion(time.Now().Add(time.Second)) {
		t.Fatalf("the sidecar's version %d after a nanosecond app version: the clock was dragged ahead", v)
	}
	if v := n.clock.reserve(1); v >= wallVersion(time.Now().Add(time.Second)) {
		t.Fatalf("next sidecar version %d: the clock was dragged ahead by a nanosecond version", v)
	}

	for _, v := range []uint64{uint64(time.Now().Add(2 * time.Minute).UnixNano()), wallVersion(time.Now().Add(2 * time.Minute)), math.MaxUint64} {
		_, err := tn.app.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "ok"}, {TaskId: "far", Version: v}}})
		wantInvalid(t, err, "events[1].version")
	}
	if got := n.versionsRefused.app.Load(); got != 3 {
		t.Fatalf("versions refused from the app: %d, want 3", got)
	}

	// A peer: nanoseconds within 5 minutes are stored; 10 minutes ahead and 2^64-1 are
	// INVALID and counted; the others in the request are still taken.
	peerNanos := uint64(time.Now().Add(4 * time.Minute).UnixNano())
	rr, err := tn.peer.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "x", Events: []*fanoutv1.Event{
		{TaskId: "p/nanos", Version: peerNanos},
		{TaskId: "p/far", Version: uint64(time.Now().Add(10 * time.Minute).UnixNano())},
		{TaskId: "p/max", Version: math.MaxUint64},
		{TaskId: "p/counter", Version: 3},
	}})
	if err != nil {
		t.Fatalf("Replicate: %v", err)
	}
	ok, invalid := fanoutv1.ItemStatus_ITEM_STATUS_OK, fanoutv1.ItemStatus_ITEM_STATUS_INVALID
	if want := []fanoutv1.ItemStatus{ok, invalid, invalid, ok}; !equalStatuses(rr.GetStatuses(), want) {
		t.Fatalf("Replicate statuses %v, want %v", rr.GetStatuses(), want)
	}
	if got := n.versionsRefused.peer.Load(); got != 2 {
		t.Fatalf("versions refused from peers: %d, want 2", got)
	}

	// Anti-entropy takes the same versions and refuses a whole message with a bad one.
	entry := func(task string, v uint64) *fanoutv1.SyncEntry {
		raw, err := proto.Marshal(&fanoutv1.Event{TaskId: task, Version: v})
		if err != nil {
			t.Fatal(err)
		}
		return &fanoutv1.SyncEntry{Event: raw, Origin: "y"}
	}
	if applied, err := n.Apply("y", []*fanoutv1.SyncEntry{entry("s/nanos", nanos), entry("s/counter", 9)}); err != nil || applied != 2 {
		t.Fatalf("anti-entropy with nanosecond and counter versions: %d applied, %v; want 2", applied, err)
	}
	_, err = n.Apply("y", []*fanoutv1.SyncEntry{entry("s/ok", 1), entry("s/far", math.MaxUint64)})
	if err == nil || !strings.Contains(err.Error(), "entries[1].event.version") {
		t.Fatalf("anti-entropy with 2^64-1: %v, want invalid naming entries[1].event.version", err)
	}
	if got := n.versionsRefused.sync.Load(); got != 1 {
		t.Fatalf("versions refused from anti-entropy: %d, want 1", got)
	}
	if _, ok := n.table.Get([]byte("s/ok")); ok {
		t.Fatal("a refused anti-entropy message was half applied")
	}
}

func equalStatuses(a, b []fanoutv1.ItemStatus) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
