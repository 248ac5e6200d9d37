package mesh

import (
	"context"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/state"
)

// syncFake is a peer connection that replicates through a FakeNetwork and answers
// anti-entropy: Digest with every node of the tree differing, then Pull hangs until
// its context ends ("hung"), or answers nothing ("good"). Each call is reported on
// calls.
type syncFake struct {
	*peers.FakeConn
	name  string
	hang  bool
	calls chan string // "<name> digest", "<name> pull", "<name> pull ended"
}

var _ Conn = (*syncFake)(nil)

func (f *syncFake) report(what string) {
	select {
	case f.calls <- f.name + " " + what:
	default: // the test reads what it waits for; the rest is not kept
	}
}

func (f *syncFake) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	f.report("digest")
	hashes := make([]uint64, len(req.GetNodes())*state.DigestFanout)
	for i := range hashes {
		hashes[i] = ^uint64(i)
	}
	return &fanoutv1.DigestResponse{NodeId: f.name, Root: 1, Hashes: hashes}, nil
}

func (f *syncFake) Pull(ctx context.Context, _ *fanoutv1.PullRequest, _ func(*fanoutv1.PullResponse) error) error {
	f.report("pull")
	if !f.hang {
		return nil
	}
	<-ctx.Done()
	f.report("pull ended")
	return ctx.Err()
}

func (f *syncFake) Push(context.Context, *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	return &fanoutv1.PushResponse{NodeId: f.name}, nil
}

// syncBoundsNode starts node "a" with peers "hung" and "good" (syncFake).
func syncBoundsNode(t *testing.T, tweak func(*nodeConfig)) (*member, chan string) {
	t.Helper()
	fake := peers.NewFakeNetwork()
	ok := func(_ context.Context, r *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
		return &fanoutv1.ReplicateResponse{NodeId: "x", Statuses: make([]fanoutv1.ItemStatus, len(r.GetEvents()))}, nil
	}
	fake.Handle("hung", ok)
	fake.Handle("good", ok)
	calls := make(chan string, 64)
	cfg := testConfig("a", "hung", "good")
	cfg.AntiEntropyInterval = 20 * time.Millisecond
	cfg.Dial = func(addr string) (Conn, error) {
		return &syncFake{FakeConn: fake.Dial(addr), name: addr, hang: addr == "hung", calls: calls}, nil
	}
	tweak(&cfg)
	return startMember(t, cfg), calls
}

// await reads calls until want comes, failing the test after a named deadline.
func await(t *testing.T, calls <-chan string, want string) {
	t.Helper()
	const within = 10 * time.Second // generous: a busy machine
	deadline := time.After(within)
	for {
		select {
		case c := <-calls:
			if c == want {
				return
			}
		case <-deadline:
			t.Fatalf("%q did not come within %s", want, within)
		}
	}
}

// TestRoundsDoNotWaitOnAHungPeer: with a peer hung in Pull (and a call deadline
// longer than the test), the node's rounds with its other peer go on, round after
// round.
func TestRoundsDoNotWaitOnAHungPeer(t *testing.T) {
	tn, calls := syncBoundsNode(t, func(c *nodeConfig) {
		c.ReplicateTimeout = time.Hour // the hung Pull outlasts the test
		c.SyncTimeout = 50 * time.Millisecond
	})
	await(t, calls, "hung pull")
	for range 3 {
		await(t, calls, "good pull")
	}
	l := linkTo(t, tn.mesh, "hung")
	if !l.sync.running.Load() {
		t.Fatal("the round with the hung peer ended; the test wants it hung throughout")
	}
}

// TestHungPullTimesOut: a peer that answers Digest and hangs in Pull fails its
// round after --replicate-timeout, counted as a pull timeout; bootstrap does not
// try it again, so readiness does not wait for --sync-timeout.
func TestHungPullTimesOut(t *testing.T) {
	tn, calls := syncBoundsNode(t, func(c *nodeConfig) {
		c.ReplicateTimeout = 100 * time.Millisecond
		c.SyncTimeout = time.Hour
	})
	await(t, calls, "hung pull ended")
	const readyWithin = 10 * time.Second
	select {
	case <-tn.node.Ready():
	case <-time.After(readyWithin):
		t.Fatalf("not ready within %s with a peer hung in Pull (--sync-timeout 1h)", readyWithin)
	}
	ok, reason := tn.node.Readiness()
	if !ok || !strings.Contains(reason, "synced with 1 of 2 peers") || !strings.Contains(reason, "pull: the peer sent nothing for 100ms") {
		t.Errorf("readiness %t %q; want ready, synced with the good peer, the hung one failed naming the pull", ok, reason)
	}
	l := linkTo(t, tn.mesh, "hung")
	await(t, calls, "hung pull ended") // a periodic round's
	l.sync.mu.Lock()
	timeouts, lastErr := l.sync.timeouts["pull"], l.sync.lastErr
	l.sync.mu.Unlock()
	if timeouts < 1 || !strings.Contains(lastErr, antientropy.ErrTimeout.Error()) {
		t.Errorf("pull timeouts %d, last error %q; want counted, ErrTimeout", timeouts, lastErr)
	}
}

// linkTo returns m's link to addr, failing the test if there is none.
func linkTo(t *testing.T, m *Mesh, addr string) *link {
	t.Helper()
	for _, l := range *m.links.Load() {
		if l.addr == addr {
			return l
		}
	}
	t.Fatalf("no link to %s", addr)
	return nil
}

// TestSyncStatsCountsLimitsAndWarnsAtARate: with injected time, rounds whose push was
// cut or held are counted apart, timeouts by call, and the WARN about them comes at
// most once per peerErrorLogEvery, with the rounds it covers.
func TestSyncStatsCountsLimitsAndWarnsAtARate(t *testing.T) {
	var s syncStats
	t0 := time.Unix(1_000_000, 0)
	for i, step := range []struct {
		at          time.Duration
		r           antientropy.Result
		warn        bool
		limited     int
		cut, held   uint64
		pullTimeout uint64
	}{
		{0, antientropy.Result{PushCut: true}, true, 1, 1, 0, 0},
		{10 * time.Second, antientropy.Result{PushCut: true, PushHeld: true}, false, 0, 1, 1, 0},
		{20 * time.Second, antientropy.Result{TimedOut: "pull"}, false, 0, 1, 1, 1},
		{25 * time.Second, antientropy.Result{PushCut: true, PushHeld: true}, false, 0, 1, 2, 1},
		{peerErrorLogEvery, antientropy.Result{PushCut: true, PushHeld: true}, true, 3, 1, 3, 1},
		{peerErrorLogEvery + time.Second, antientropy.Result{InSync: true}, false, 0, 1, 3, 1},
	} {
		var err error
		if step.r.TimedOut != "" {
			err = antientropy.ErrTimeout
		}
		warn, limited := s.record(step.r, err, t0.Add(step.at))
		if warn != step.warn || limited != step.limited {
			t.Errorf("round %d: warn %t covering %d, want %t covering %d", i, warn, limited, step.warn, step.limited)
		}
		if s.pushCut != step.cut || s.pushHeld != step.held || s.timeouts["pull"] != step.pullTimeout {
			t.Errorf("round %d: cut %d, held %d, pull timeouts %d; want %d, %d, %d", i, s.pushCut, s.pushHeld, s.timeouts["pull"], step.cut, step.held, step.pullTimeout)
		}
	}
}
