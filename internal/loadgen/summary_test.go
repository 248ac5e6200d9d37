package loadgen

import (
	"testing"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestPeerCounters(t *testing.T) {
	st := func(overridden, succeeded, stale, overflow uint64) *fanoutv1.GetStatusResponse {
		return &fanoutv1.GetStatusResponse{Peers: []*fanoutv1.PeerStatus{
			{Overridden: overridden, Succeeded: succeeded, Stale: stale, Overflow: overflow, Replayed: 1},
			{Overridden: overridden, Succeeded: succeeded, Expired: 1, Permanent: 1},
		}}
	}
	base, final := countersOf(st(1, 10, 0, 0)), countersOf(st(6, 110, 5, 3))
	got := final.minus(base)
	want := peerCounters{overridden: 10, wire: 205, dropped: 3, replayed: 0}
	if got != want {
		t.Fatalf("final - base = %+v, want %+v", got, want)
	}
	if d := base.minus(final); d != (peerCounters{}) {
		t.Fatalf("a counter that went down must floor at 0, got %+v", d)
	}
	if countersOf(nil) != nil {
		t.Fatal("countersOf(nil) != nil")
	}
}

func TestKeyVersionsRaiseOnly(t *testing.T) {
	kv := make(keyVersions, 2)
	kv.raise(0, 5)
	kv.raise(0, 3)
	kv.raise(1, 7)
	if kv[0].Load() != 5 || kv[1].Load() != 7 {
		t.Fatalf("versions %d %d, want 5 7", kv[0].Load(), kv[1].Load())
	}
}

func testSubscriber(keys int) *subscriber {
	cfg := DefaultConfig()
	cfg.Prefix, cfg.Keys = "b/", keys
	s := &subscriber{cfg: &cfg, clock: clock{now: time.Now, epoch: time.Unix(1000, 0)}, rec: newRecorder()}
	if keys > 0 {
		s.keys = make([]keyState, keys)
	}
	s.measureFrom.Store(int64(time.Second))
	return s
}

func event(id string, version uint64, stamp time.Duration, payload int) *fanoutv1.SubscribeResponse {
	p := make([]byte, payload)
	loadkit.Stamp{Sent: stamp, Due: stamp}.Put(p)
	return &fanoutv1.SubscribeResponse{Event: &fanoutv1.Event{TaskId: id, Version: version, Payload: p}}
}

func TestObserve(t *testing.T) {
	s := testSubscriber(2)
	observeMsg(t, s, event("b/k0", 10, 500*time.Millisecond, 100), 502*time.Millisecond)   // warmup
	observeMsg(t, s, event("b/k0", 20, 1500*time.Millisecond, 100), 1503*time.Millisecond) // measured, 3 ms
	observeMsg(t, s, event("b/k0", 15, 1500*time.Millisecond, 100), 1600*time.Millisecond) // older version: not the latest
	snap := s.rec.snapshot()
	if snap.total != 3 || snap.measured != 2 {
		t.Fatalf("total %d measured %d, want 3 and 2", snap.total, snap.measured)
	}
	if got := snap.hist.Min(); got < 2990 || got > 3010 {
		t.Fatalf("smallest measured latency %d µs, want 3000", got)
	}
	if s.keys[0].version.Load() != 20 || time.Duration(s.keys[0].at.Load()) != 1503*time.Millisecond {
		t.Fatalf("key 0: version %d at %s", s.keys[0].version.Load(), time.Duration(s.keys[0].at.Load()))
	}
	if s.fromSubmittedAt.Load() {
		t.Fatal("every event had a stamp")
	}
}

func TestObserveWithoutStampUsesSubmittedAt(t *testing.T) {
	s := testSubscriber(0)
	ev := event("b/p0-1", 1, 0, 4)
	ev.SubmittedAt = timestamppb.New(s.clock.epoch.Add(2 * time.Second))
	observeMsg(t, s, ev, 2*time.Second+7*time.Millisecond)
	snap := s.rec.snapshot()
	if !s.fromSubmittedAt.Load() || snap.measured != 1 {
		t.Fatalf("fromSubmittedAt %v measured %d", s.fromSubmittedAt.Load(), snap.measured)
	}
	if got := snap.hist.Max(); got < 6990 || got > 7010 {
		t.Fatalf("latency %d µs, want 7000", got)
	}
}

func TestObserveSplitsAtTheOrigin(t *testing.T) {
	s := testSubscriber(0)
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(s.clock.epoch.Add(d)) }
	ev := event("b/p0-1", 1, 500*time.Millisecond, 100) // warmup: not split
	ev.SubmittedAt = at(501 * time.Millisecond)
	observeMsg(t, s, ev, 503*time.Millisecond)
	ev = event("b/p0-2", 1, 2*time.Second, 100) // sent at 2 s, accepted 300 µs later, arrived 1.2 ms after that
	ev.SubmittedAt = at(2*time.Second + 300*time.Microsecond)
	observeMsg(t, s, ev, 2*time.Second+1500*time.Microsecond)
	observeMsg(t, s, event("b/p0-3", 1, 2*time.Second, 100), 2*time.Second+time.Millisecond) // no submitted_at
	snap := s.rec.snapshot()
	if snap.measured != 2 || snap.toOrigin.TotalCount() != 1 || snap.fromOrigin.TotalCount() != 1 {
		t.Fatalf("measured %d, split %d/%d, want 2 and 1/1", snap.measured, snap.toOrigin.TotalCount(), snap.fromOrigin.TotalCount())
	}
	if to, from := snap.toOrigin.Max(), snap.fromOrigin.Max(); to < 299 || to > 301 || from < 1195 || from > 1205 {
		t.Fatalf("split %d µs to the origin, %d µs from it; want 300 and 1200", to, from)
	}
	b := &bench{subs: []*subscriber{s}, cfg: s.cfg}
	r := b.result(&peerCounters{}, nil, &measurement{interrupted: true})
	if r.ToOrigin == nil || r.FromOrigin == nil || r.FromOrigin.P50 < 1195 || r.FromOrigin.P50 > 1205 {
		t.Fatalf("result split %+v / %+v", r.ToOrigin, r.FromOrigin)
	}
}

func TestHolds(t *testing.T) {
	s := testSubscriber(3)
	latest := make(keyVersions, 3)
	latest.raise(0, 10)
	latest.raise(1, 20) // key 2 was never submitted
	observeMsg(t, s, event("b/k0", 10, 0, 8), 5*time.Millisecond)
	if _, ok := s.holds(latest); ok {
		t.Fatal("holds without key 1")
	}
	observeMsg(t, s, event("b/k1", 20, 0, 8), 9*time.Millisecond)
	at, ok := s.holds(latest)
	if !ok || at != 9*time.Millisecond {
		t.Fatalf("holds = %s, %v; want 9ms, true", at, ok)
	}
}
