package fanout

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/fakeclock"
	"github.com/fanout/fanout/pkg/mesh"
	"github.com/fanout/fanout/pkg/peers"
)

// stalledSyncPeer is a peer whose anti-entropy answers nothing until open is closed,
// then refuses: a node with it as its only peer stays in bootstrap until then. It
// counts the Digest calls it is asked (as each starts).
type stalledSyncPeer struct {
	*peers.FakeConn
	open    chan struct{}
	digests *tally
}

var errStalledPeer = errors.New("stalled peer: refused")

func (p stalledSyncPeer) Digest(ctx context.Context, _ *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	p.digests.Add()
	select {
	case <-p.open:
		return nil, errStalledPeer
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p stalledSyncPeer) Pull(context.Context, *fanoutv1.PullRequest, func(*fanoutv1.PullResponse) error) error {
	return errStalledPeer
}

func (p stalledSyncPeer) Push(context.Context, *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	return nil, errStalledPeer
}

var _ mesh.Conn = stalledSyncPeer{}

// bootstrappingNode starts node "a" with one peer whose anti-entropy stalls until the
// returned function is called; the tally counts the peer's Digest calls.
func bootstrappingNode(t *testing.T) (*testNode, *tally, func()) {
	t.Helper()
	open := make(chan struct{})
	digests := &tally{}
	fake := peers.NewFakeNetwork()
	cfg := testConfig("a", "b")
	cfg.Mesh.SyncTimeout = time.Minute // the test ends the bootstrap, not the timeout
	cfg.Mesh.Dial = func(addr string) (mesh.Conn, error) { return stalledSyncPeer{fake.Dial(addr), open, digests}, nil }
	tn := startTestNode(t, cfg)
	var once bool
	release := func() {
		if !once {
			once = true
			close(open)
		}
	}
	t.Cleanup(release)
	return tn, digests, release
}

// TestSnapshotWaitsForBootstrap: while a node bootstraps, a Subscribe with snapshot
// sends nothing (the call's deadline ends it, saying what it waited for), one with
// allow_unsynced gets the table as it is at once, and once the bootstrap ends the
// waiting stream gets its snapshot.
func TestSnapshotWaitsForBootstrap(t *testing.T) {
	tn, digests, release := bootstrappingNode(t)
	if _, err := tn.app.Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev("k", "v")}}); err != nil {
		t.Fatal(err)
	}
	// The bootstrap's goroutine says it has begun a moment after New returns (a Submit
	// over gRPC used to take that long), before it asks the peer for its digest.
	waitOn(t, "the bootstrap to begin", digests.Changed, func() bool { _, reason := tn.node.Readiness(); return reason != "" })
	if ok, reason := tn.node.Readiness(); ok || !strings.Contains(reason, "bootstrap") {
		t.Fatalf("readiness %t %q, want not ready, bootstrapping", ok, reason)
	}

	// A snapshot with a deadline: ends with it, having sent nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := tn.node.Subscribe(ctx, &fanoutv1.SubscribeRequest{Snapshot: true}, func([]byte) error {
		t.Error("a snapshot was sent during the bootstrap")
		return nil
	})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "allow_unsynced") || !strings.Contains(err.Error(), "syncing with 1 peers") {
		t.Errorf("Subscribe with snapshot past its deadline: %v; want DeadlineExceeded saying what it waited for and allow_unsynced", err)
	}
	// Its status, DEADLINE_EXCEEDED, is the edge's: pkg/grpcapi's TestToStatus.

	// A waiting stream, over gRPC.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	waiting, err := tn.app.Subscribe(wctx, &fanoutv1.SubscribeRequest{Snapshot: true})
	if err != nil {
		t.Fatal(err)
	}
	type first struct {
		resp  *fanoutv1.SubscribeResponse
		ready bool // the node's bootstrap had ended when it arrived
		err   error
	}
	firstc := make(chan first, 1)
	go func() {
		r, err := waiting.Recv()
		ready := false
		select {
		case <-tn.node.Ready():
			ready = true
		default:
		}
		firstc <- first{r, ready, err}
	}()
	waitOn(t, "the waiting stream counted", tn.node.SubscribersChanged, func() bool { return tn.node.subscribers.Load() == 1 })

	// allow_unsynced: the table as it is, at once.
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ucancel()
	unsynced, err := tn.app.Subscribe(uctx, &fanoutv1.SubscribeRequest{Snapshot: true, AllowUnsynced: true})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		r, err := unsynced.Recv()
		if err != nil {
			t.Fatalf("allow_unsynced during the bootstrap: %v", err)
		}
		if r.GetSnapshotComplete() {
			break
		}
		keys = append(keys, r.GetEvent().GetTaskId())
	}
	if len(keys) != 1 || keys[0] != "k" {
		t.Errorf("allow_unsynced snapshot %v, want [k]", keys)
	}
	if ok, _ := tn.node.Readiness(); ok {
		t.Fatal("the node became ready during the test")
	}
	ucancel()

	release()
	select {
	case f := <-firstc:
		if f.err != nil || f.resp.GetEvent().GetTaskId() != "k" || !f.ready {
			t.Errorf("the waiting stream's first response: %v (err %v), bootstrap ended %t; want k, after the bootstrap", f.resp, f.err, f.ready)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting snapshot did not come within 10s of the bootstrap's end")
	}
	if r, err := waiting.Recv(); err != nil || !r.GetSnapshotComplete() {
		t.Errorf("after k: %v, %v; want snapshot_complete", r, err)
	}
}

// TestReadyCheck: while the mesh's ReadyCheck fails the node is not ready, with its
// error as the reason, in Readiness and GetStatus, and its bootstrap waits (even with
// no peers to sync with), asking again every second; once the check passes, the
// bootstrap runs and decides. The seconds are the test's to fire (mesh.Config.After).
func TestReadyCheck(t *testing.T) {
	var failing atomic.Bool
	var calls atomic.Int32
	failing.Store(true)
	clock := fakeclock.New()
	cfg := testConfig("a")
	cfg.Mesh.After = clock.After
	cfg.Mesh.ReadyCheck = func() error {
		calls.Add(1)
		if failing.Load() {
			return errors.New("certificate x expired")
		}
		return nil
	}
	tn := startTestNode(t, cfg)
	st, err := tn.app.GetStatus(context.Background(), &fanoutv1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetReady() || st.GetReadyReason() != "not ready: certificate x expired" {
		t.Errorf("GetStatus with the check failing: ready %t, reason %q", st.GetReady(), st.GetReadyReason())
	}
	// The bootstrap asked, failed and waits a second; each time that second passes it
	// asks again, fails and waits another.
	retry := fakeclock.Exactly(time.Second)
	clock.Fire(t, "the bootstrap's first retry", retry)
	clock.Started(t, "the bootstrap's second retry", retry)
	if n := calls.Load(); n < 3 { // GetStatus once, the bootstrap at least twice
		t.Fatalf("the check was asked %d times, want 3 or more", n)
	}
	select {
	case <-tn.node.Ready():
		t.Fatal("the bootstrap ended while the check failed")
	default:
	}
	failing.Store(false)
	clock.Fire(t, "the retry after which the check passes", retry)
	select {
	case <-tn.node.Ready():
	case <-time.After(waitTimeout):
		t.Fatalf("the bootstrap did not end within %s of the check passing", waitTimeout)
	}
	if ok, reason := tn.node.Readiness(); !ok || reason != "ready: no peers to sync with" {
		t.Errorf("with the check passing: ready %t, %q", ok, reason)
	}
}
