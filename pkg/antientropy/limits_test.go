package antientropy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
)

// Deadlines of these tests: a call's own (short, so that the tests are quick) and
// how long a test waits for a round that must end by one (generous: a busy machine).
const (
	testCall  = 100 * time.Millisecond
	testPull  = 400 * time.Millisecond
	roundEnds = 10 * time.Second
)

// withBounds sets sd's round bounds (0 fields keep the defaults) and clock.
func withBounds(t *testing.T, sd *side, c Config) {
	t.Helper()
	c.NodeID, c.Table, c.Apply, c.MessageBytes = sd.id, sd.tab, sd.apply, sd.s.cfg.MessageBytes
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	sd.s = s
}

// hang is a peer that answers as to does, but at one point waits for the call's
// context to end instead: in Digest, in Pull before its first message ("pull") or
// after it ("pull after one"), in a Pull that sends a message every step forever
// ("trickle"), or in Push.
type hang struct {
	*wire
	at   string
	step time.Duration
}

func (h *hang) Digest(ctx context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	if h.at == "digest" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.wire.Digest(ctx, req)
}

func (h *hang) Pull(ctx context.Context, req *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error {
	switch h.at {
	case "pull":
		<-ctx.Done()
		return ctx.Err()
	case "pull after one":
		if err := recv(&fanoutv1.PullResponse{Want: []string{}}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	case "trickle":
		tick := time.NewTicker(h.step)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
				if err := recv(&fanoutv1.PullResponse{}); err != nil {
					return err
				}
			}
		}
	}
	return h.wire.Pull(ctx, req, recv)
}

func (h *hang) Push(ctx context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	if h.at == "push" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.wire.Push(ctx, req)
}

// TestRoundDeadlines: a peer that stops answering in any call of a round ends the
// round with ErrTimeout naming the call, after the call's deadline and not before;
// a round whose own context ends is not a timeout.
func TestRoundDeadlines(t *testing.T) {
	for _, tc := range []struct {
		at, call    string
		callTimeout time.Duration
		min         time.Duration // the round lasts at least this
		msg         string
	}{
		{"digest", "digest", testCall, testCall, "digest: no answer within 100ms"},
		{"pull", "pull", testCall, testCall, "pull: the peer sent nothing for 100ms"},
		{"pull after one", "pull", testCall, testCall, "pull: the peer sent nothing for 100ms"},
		// A message every 25ms, far within the silence allowed.
		{"trickle", "pull", 10 * testCall, testPull, "pull: the stream did not end within 400ms"},
		{"push", "push", testCall, testCall, "push: no answer within 100ms"},
	} {
		t.Run(tc.at, func(t *testing.T) {
			a, b := newSide(t, "a", 0), newSide(t, "b", 0)
			withBounds(t, a, Config{CallTimeout: tc.callTimeout, PullTimeout: testPull})
			a.put("only-a", 1, "a", false) // a pushes it
			b.put("only-b", 1, "b", false)
			p := &hang{wire: dial(b), at: tc.at, step: testCall / 4}
			start := time.Now()
			r, err := roundWithin(t, a, p, nil)
			took := time.Since(start)
			if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), tc.msg) || r.TimedOut != tc.call {
				t.Fatalf("round: %v, TimedOut %q; want ErrTimeout naming %q, TimedOut %q", err, r.TimedOut, tc.msg, tc.call)
			}
			if took < tc.min {
				t.Errorf("the round ended %s after it began, before the deadline %s", took, tc.min)
			}
		})
	}
	t.Run("the round's own context", func(t *testing.T) {
		a, b := newSide(t, "a", 0), newSide(t, "b", 0)
		withBounds(t, a, Config{CallTimeout: time.Hour})
		b.put("only-b", 1, "b", false)
		ctx, cancel := context.WithTimeout(context.Background(), testCall)
		defer cancel()
		_, err := a.s.Round(ctx, &hang{wire: dial(b), at: "pull"}, nil)
		if err == nil || errors.Is(err, ErrTimeout) {
			t.Fatalf("round canceled by its caller: %v, want the context's error, not ErrTimeout", err)
		}
	})
}

// roundWithin runs a round, failing the test if it does not end within roundEnds.
func roundWithin(t *testing.T, a *side, p Peer, g *Gate) (Result, error) {
	t.Helper()
	type out struct {
		r   Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		r, err := a.s.Round(context.Background(), p, g)
		done <- out{r, err}
	}()
	select {
	case o := <-done:
		return o.r, o.err
	case <-time.After(roundEnds):
		t.Fatalf("the round did not end within %s", roundEnds)
		return Result{}, nil
	}
}

// TestPullSilenceIsThePeers: the time the caller spends on a message (storing it)
// does not count as the peer's silence.
func TestPullSilenceIsThePeers(t *testing.T) {
	a, b := newSide(t, "a", 1<<10), newSide(t, "b", 1<<10)
	for i := range 200 {
		b.put(fmt.Sprintf("k%d", i), 1, "b", false)
	}
	withBounds(t, a, Config{CallTimeout: testCall})
	apply := a.s.cfg.Apply
	a.s.cfg.Apply = func(from string, es []*fanoutv1.SyncEntry) (int, error) {
		<-time.After(2 * testCall) // a slow disk
		return apply(from, es)
	}
	r, err := roundWithin(t, a, dial(b), nil)
	if err != nil || r.Pulled != 200 {
		t.Fatalf("round %+v: %v; want 200 pulled, with each message stored slower than the call deadline", r, err)
	}
}

// liar is a peer whose Digest says every node of the tree differs and whose Pull
// asks for every key the caller has (each twice, and one outside the leaves asked
// about): it would get the caller's whole table each round. It records the pushes.
type liar struct {
	pushes         int
	entries, bytes int
	pushedPerRound []int
	roundEntries   int
	digests, pulls int
}

func (l *liar) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	l.digests++
	hashes := make([]uint64, len(req.GetNodes())*state.DigestFanout)
	for i := range hashes {
		hashes[i] = uint64(i) ^ 0x5bd1e995
	}
	return &fanoutv1.DigestResponse{NodeId: "liar", Root: 1, Hashes: hashes}, nil
}

func (l *liar) Pull(_ context.Context, req *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error {
	l.pulls++
	var want []string
	for _, h := range req.GetHave() {
		want = append(want, h.GetTaskId(), h.GetTaskId())
	}
	return recv(&fanoutv1.PullResponse{Want: append(want, "outside/"+req.GetHave()[0].GetTaskId())})
}

func (l *liar) Push(_ context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	l.pushes++
	l.entries += len(req.GetEntries())
	l.roundEntries += len(req.GetEntries())
	l.bytes += proto.Size(req)
	return &fanoutv1.PushResponse{NodeId: "liar", Applied: uint32(len(req.GetEntries()))}, nil
}

// endRound records the entries pushed in the round that just ended.
func (l *liar) endRound() {
	l.pushedPerRound = append(l.pushedPerRound, l.roundEntries)
	l.roundEntries = 0
}

// TestPushBoundedPerRound: a lying peer gets at most PushEntries entries and
// PushBytes bytes a round, however much it asks for, and each key once.
func TestPushBoundedPerRound(t *testing.T) {
	for _, tc := range []struct {
		name                string
		keys, payload       int
		entries, bytes      int
		wantPushed, maxSent int
	}{
		{"by entries", 25_000, 10, 0, 0, 10_000, 0},
		{"by bytes", 2_000, 1 << 10, 0, 256 << 10, 0, 256<<10 + 2<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newSide(t, "a", 0)
			pad := strings.Repeat("x", tc.payload)
			for i := range tc.keys {
				a.put(fmt.Sprintf("k%05d/%s", i, pad), 1, "a", false)
			}
			withBounds(t, a, Config{PushEntries: tc.entries, PushBytes: tc.bytes})
			l := &liar{}
			r, err := roundWithin(t, a, l, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !r.PushCut || r.PushHeld || r.Wanted != a.s.cfg.PushEntries+1 && tc.entries == 0 && tc.bytes == 0 {
				t.Errorf("round %+v: want PushCut, not held, Wanted %d", r, a.s.cfg.PushEntries+1)
			}
			if tc.wantPushed > 0 && (l.entries != tc.wantPushed || r.Pushed != tc.wantPushed) {
				t.Errorf("pushed %d entries (round says %d) of %d asked for, want %d", l.entries, r.Pushed, tc.keys, tc.wantPushed)
			}
			if tc.maxSent > 0 && (l.bytes > tc.maxSent || l.entries == 0) {
				t.Errorf("pushed %d bytes in %d entries, want at most %d (PushBytes and the requests' framing)", l.bytes, l.entries, tc.maxSent)
			}
			t.Logf("%d keys of %d-byte payloads asked for (each twice): pushed %d entries, %d bytes in %d calls; %+v", tc.keys, tc.payload, l.entries, l.bytes, l.pushes, r)
		})
	}
}

// TestGateHoldsALiar: with injected time, a peer that asks for too much each round
// gets one bounded push, then nothing for PushHold, doubling; rounds with it still
// run. A peer that then asks for little is pushed to again once the hold passes.
func TestGateHoldsALiar(t *testing.T) {
	a := newSide(t, "a", 0)
	for i := range 3_000 {
		a.put(fmt.Sprintf("k%05d", i), 1, "a", false)
	}
	now := time.Unix(1_000_000, 0)
	withBounds(t, a, Config{PushEntries: 1_000, PushHold: time.Minute, PushHoldMax: 4 * time.Minute, Now: func() time.Time { return now }})
	l := &liar{}
	var g Gate
	type step struct {
		after          time.Duration // since the previous round
		pushed         int
		cut, held      bool
		closedForAfter time.Duration // the gate stays closed this long after the round
	}
	for i, s := range []step{
		{0, 1_000, true, false, time.Minute},
		{30 * time.Second, 0, true, true, 2 * time.Minute},     // held; still asks: the hold doubles
		{time.Minute, 0, true, true, 4 * time.Minute},          // 90s after the first: held
		{5 * time.Minute, 1_000, true, false, 4 * time.Minute}, // open again, a slice; at the most
	} {
		now = now.Add(s.after)
		r, err := roundWithin(t, a, l, &g)
		l.endRound()
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if r.Pushed != s.pushed || r.PushCut != s.cut || r.PushHeld != s.held {
			t.Errorf("round %d: pushed %d, cut %t, held %t; want %d, %t, %t", i, r.Pushed, r.PushCut, r.PushHeld, s.pushed, s.cut, s.held)
		}
		if got := g.ClosedUntil().Sub(now); got != s.closedForAfter {
			t.Errorf("round %d: the gate closed for %s, want %s", i, got, s.closedForAfter)
		}
	}
	if l.digests == 0 || l.pulls < 4 {
		t.Errorf("rounds with a held peer still run: %d digests, %d pulls", l.digests, l.pulls)
	}
	t.Logf("entries pushed per round: %v", l.pushedPerRound)

	// A peer that asks for little once the hold has passed: it is pushed to.
	b := newSide(t, "b", 0)
	for i := 10; i < 3_000; i++ {
		b.put(fmt.Sprintf("k%05d", i), 1, "a", false) // the same entries as a's
	}
	b.put("k00011", 2, "b", false) // newer than a's
	now = g.ClosedUntil().Add(time.Second)
	r, err := roundWithin(t, a, dial(b), &g)
	if err != nil || r.PushCut || r.PushHeld || r.Pulled != 1 || r.Pushed != 10 {
		t.Fatalf("round with a peer that lacks 10 keys: %+v, %v; want them pushed, not cut or held", r, err)
	}
}

func TestHoldFor(t *testing.T) {
	for _, tc := range []struct {
		strikes int
		want    time.Duration
	}{
		{1, time.Minute}, {2, 2 * time.Minute}, {3, 4 * time.Minute}, {5, 16 * time.Minute}, {6, 16 * time.Minute}, {1000, 16 * time.Minute},
	} {
		if got := holdFor(tc.strikes, time.Minute, 16*time.Minute); got != tc.want {
			t.Errorf("holdFor(%d): %s, want %s", tc.strikes, got, tc.want)
		}
	}
}

// TestPullBytesBound: a round stops pulling at PullBytes; the next rounds go on from
// there until the tables are in sync.
func TestPullBytesBound(t *testing.T) {
	a, b := newSide(t, "a", 16<<10), newSide(t, "b", 16<<10)
	pad := strings.Repeat("p", 200)
	for i := range 5_000 {
		b.put(fmt.Sprintf("k%05d/%s", i, pad), 1, "b", false)
	}
	withBounds(t, a, Config{PullBytes: 256 << 10})
	want := winners(a, b)
	rounds := 0
	for ; rounds < 20; rounds++ {
		r, err := roundWithin(t, a, dial(b), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.InSync {
			break
		}
		// An entry is more than its 200-byte payload.
		if most := (256<<10 + 16<<10) / 200; r.Pulled > most {
			t.Errorf("round %d pulled %d entries of over 200 bytes, past PullBytes %d and a message", rounds, r.Pulled, 256<<10)
		}
	}
	checkHolds(t, a, want)
	if rounds < 4 {
		t.Errorf("%d rounds pulled ~1.2 MB at 256 KiB a round", rounds)
	}
	t.Logf("%d rounds to pull 5,000 entries at 256 KiB a round", rounds)
}
