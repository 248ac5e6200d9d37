package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Anti-entropy against peers that break the protocol on purpose: a fake peer, written
// here, that the real nodes have in their --peers. It serves PeerService over gRPC:
// Replicate answers every event stored, Digest says every node of the hash tree
// differs, and then, by mode:
//
//   - hangPull: Pull never answers (until the caller gives up, or the test ends);
//   - lie: Pull asks for every key the caller has, and Push takes everything.

type fakeMode int

const (
	hangPull fakeMode = iota
	lie
)

// fakePeer is the fake peer's server and what it saw. Its handlers run on gRPC's
// goroutines; mu guards the records.
type fakePeer struct {
	fanoutv1.UnimplementedPeerServiceServer
	id   string
	addr string
	mode fakeMode
	srv  *grpc.Server
	stop chan struct{} // closed at the test's end: hung handlers return

	mu sync.Mutex
	// rounds are every caller's rounds, as the fake sees them: one begins with a
	// Digest of the root level. Guarded by mu.
	rounds map[string][]*fakeRound
}

// fakeRound is one caller's round with the fake peer.
type fakeRound struct {
	at                    time.Time
	pulls                 int
	stampsBytes           int // the Pull requests' size: what the caller told the fake it has
	pushes, entries, size int // Push calls, the entries in them, their size (protobuf)
}

// treeFanout is the children of a node of the digest tree (proto/fanout/v1/peer.proto).
const treeFanout = 16

func startFakePeer(t *testing.T, mode fakeMode) *fakePeer {
	t.Helper()
	f := &fakePeer{id: "F", addr: freeAddrs(t, 1)[0], mode: mode, srv: grpc.NewServer(),
		stop: make(chan struct{}), rounds: map[string][]*fakeRound{}}
	lis, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	fanoutv1.RegisterPeerServiceServer(f.srv, f)
	served := make(chan struct{})
	go func() {
		defer close(served)
		f.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		close(f.stop)
		f.srv.Stop()
		<-served
	})
	return f
}

func (f *fakePeer) Replicate(_ context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return &fanoutv1.ReplicateResponse{NodeId: f.id, Statuses: make([]fanoutv1.ItemStatus, len(req.GetEvents())), Incarnation: 7}, nil
}

func (f *fakePeer) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	if req.GetLevel() == 0 {
		f.mu.Lock()
		f.rounds[req.GetNodeId()] = append(f.rounds[req.GetNodeId()], &fakeRound{at: time.Now()})
		f.mu.Unlock()
	}
	hashes := make([]uint64, len(req.GetNodes())*treeFanout)
	for i := range hashes {
		hashes[i] = 0x9e3779b97f4a7c15 ^ uint64(i) // no real table hashes so
	}
	return &fanoutv1.DigestResponse{NodeId: f.id, Root: 1, Hashes: hashes, Incarnation: 7}, nil
}

// round returns caller's current round (nil before its first Digest). Call with mu.
func (f *fakePeer) round(caller string) *fakeRound {
	rs := f.rounds[caller]
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)-1]
}

func (f *fakePeer) Pull(req *fanoutv1.PullRequest, stream fanoutv1.PeerService_PullServer) error {
	f.mu.Lock()
	if r := f.round(req.GetNodeId()); r != nil {
		r.pulls++
		r.stampsBytes += proto.Size(req)
	}
	f.mu.Unlock()
	if f.mode == hangPull {
		select {
		case <-stream.Context().Done():
		case <-f.stop:
		}
		return stream.Context().Err()
	}
	resp, size := &fanoutv1.PullResponse{}, 0
	for _, h := range req.GetHave() {
		if size > 512<<10 {
			if err := stream.Send(resp); err != nil {
				return err
			}
			resp, size = &fanoutv1.PullResponse{}, 0
		}
		resp.Want = append(resp.Want, h.GetTaskId())
		size += len(h.GetTaskId()) + 4
	}
	return stream.Send(resp)
}

func (f *fakePeer) Push(_ context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	f.mu.Lock()
	if r := f.round(req.GetNodeId()); r != nil {
		r.pushes++
		r.entries += len(req.GetEntries())
		r.size += proto.Size(req)
	}
	f.mu.Unlock()
	return &fanoutv1.PushResponse{NodeId: f.id, Applied: uint32(len(req.GetEntries()))}, nil
}

// roundsOf returns a copy of caller's rounds with the fake so far.
func (f *fakePeer) roundsOf(caller string) []fakeRound {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeRound
	for _, r := range f.rounds[caller] {
		out = append(out, *r)
	}
	return out
}

// TestAntiEntropyPastHungPull: A, B and C have F in their --peers, a fake peer that
// answers Digest and then hangs in every Pull.
//
//   - Readiness: with --sync-timeout=2m, each node is ready within readyTimeout,
//     its bootstrap round with F failed on the Pull's deadline (--replicate-timeout),
//     named in its readiness reason and counted in fanout_sync_call_timeouts_total.
//   - Repair: B frozen (SIGSTOP) while A changes 12,000 keys, so that A's queue for B
//     overflows; after SIGCONT, B holds every change within hungPeerRepair (two
//     anti-entropy intervals at their jittered longest, plus the repairing round's
//     own work), while every node's rounds with F keep hanging and failing. Before
//     each round had deadlines, a round with F held a node's rounds for 2 minutes.
//
// Every node ends with every winner; no Subscribe stream sees a version go backwards.
func TestAntiEntropyPastHungPull(t *testing.T) {
	const (
		interval    = time.Second
		syncTimeout = 2 * time.Minute
		// repairWork is the repairing round's own time, and the test's reading of
		// 12,000 keys from B: B had them 0.9s after SIGCONT on an idle 2-core
		// machine, 2.1-4.7s at load average 16-21; this allows for more. A node
		// whose rounds waited on F's Pull took 2 minutes.
		repairWork     = 10 * time.Second
		hungPeerRepair = 2*interval*5/4 + repairWork
	)
	f := startFakePeer(t, hangPull)
	c := newCluster(t, specs(3, fmt.Sprintf("--max-buffer=%d", overflowBuffer), "--anti-entropy-interval="+interval.String(),
		"--replicate-timeout=1s", "--breaker-open=500ms", "--network-failure-retry-delay=200ms", "--sync-timeout="+syncTimeout.String())...)
	fi := len(c.nodes) // F's index in every node's --peers
	for i := range c.nodes {
		c.route(i, fi, f.addr)
	}
	for _, n := range c.nodes {
		n.launch()
	}
	for _, n := range c.nodes {
		ready := n.waitServing(readinessService) // fails the test past readyTimeout
		ok, reason, err := n.readiness()
		if err != nil || !ok || !strings.Contains(reason, "failed: "+f.addr) || !strings.Contains(reason, "pull: the peer sent nothing for 1s") {
			t.Errorf("node %s ready %s after its start: %t, %q (%v); want ready, F failed on the Pull's deadline", n.spec.ID, ms(ready), ok, reason, err)
		}
		if ready >= syncTimeout {
			t.Errorf("node %s ready %s after its start: held for --sync-timeout by F", n.spec.ID, ms(ready))
		}
		t.Logf("node %s ready %s after its start (--sync-timeout %s): %q", n.spec.ID, ms(ready), syncTimeout, reason)
	}
	for _, n := range c.nodes {
		if v, err := n.metric("fanout_sync_call_timeouts_total", `peer="`+f.addr+`"`, `call="pull"`); err != nil || v < 1 {
			t.Errorf("node %s: fanout_sync_call_timeouts_total{peer=F, call=pull} %v (%v), want >= 1", n.spec.ID, v, err)
		}
	}
	a, b := c.node(0), c.node(1)
	cv := watch(t, c)
	b.signal(syscall.SIGSTOP)
	ov0 := peerOf(t, a, 1).GetOverflow()
	l := newLedger()
	submit(t, c, 0, changes("hungpull/", "v1", overflowKeys, 1000), l)
	waitOverflow(t, a, 1, ov0)
	b.signal(syscall.SIGCONT)
	resumed := time.Now()
	winner, _ := l.snapshot()
	ids := slices.Sorted(maps.Keys(winner))
	eventually(t, hungPeerRepair, "B has every change, F hanging every Pull", func() error {
		got, err := getIDs(b, ids)
		if err != nil {
			return err
		}
		return diffState("B", got, winner, false)
	})
	repairedIn := time.Since(resumed)
	// F still hangs the rounds that come to it.
	for _, n := range c.nodes {
		id := n.spec.ID
		eventually(t, convergeTimeout, "a round of "+id+" with F hangs after the repair", func() error {
			if rs := f.roundsOf(id); len(rs) == 0 || rs[len(rs)-1].at.Before(resumed) || rs[len(rs)-1].pulls == 0 {
				return fmt.Errorf("%s's rounds with F: %d, none pulling since SIGCONT", id, len(rs))
			}
			return nil
		})
	}
	hung := 0
	for _, n := range c.nodes {
		for _, r := range f.roundsOf(n.spec.ID) {
			hung += r.pulls
		}
	}
	t.Logf("F hangs every Pull: A's queue for B evicted %d of %d changes; B had every key %s after SIGCONT (bound %s; interval %s); "+
		"%d Pulls hung since the start; A's rounds: %s; B's rounds: %s",
		peerOf(t, a, 1).GetOverflow()-ov0, overflowKeys, ms(repairedIn), hungPeerRepair, interval, hung,
		syncSummary(t, c, 0), syncSummary(t, c, 1))
	cv.wait(convergeTimeout, l, 0, 1, 2)
}

// TestAntiEntropyLyingPeer: A and B have L in their --peers, a fake peer whose Digest
// says every node of the tree differs and whose Pull asks for every key. A holds
// 15,000 keys (more than a round pushes). Over lyingRounds rounds of each node with
// L:
//
//   - no round pushes more than 10,000 entries or 4 MiB to L;
//   - of lyingRounds rounds, at most one pushes at all: the next ones are held (1m,
//     doubling), so L gets 10,000 entries a minute at most, not 15,000 a round;
//   - each node counts it: fanout_sync_push_limited_total{peer=L} cut once and held
//     the rest, and logs one WARN line (at most one per 30s).
//
// A and B still converge; no Subscribe stream sees a version go backwards.
func TestAntiEntropyLyingPeer(t *testing.T) {
	const (
		keys        = 15_000
		pushEntries = 10_000  // pkg/antientropy Config.PushEntries' default
		pushBytes   = 4 << 20 // and PushBytes'
		lyingRounds = 6
		warning     = "anti-entropy: the peer asks for more than a round pushes"
	)
	f := startFakePeer(t, lie)
	c := newCluster(t, specs(2, "--anti-entropy-interval=300ms")...)
	fi := len(c.nodes)
	for i := range c.nodes {
		c.route(i, fi, f.addr)
	}
	c.start()
	cv := watch(t, c)
	l := newLedger()
	submit(t, c, 0, changes("lying/", "v1", keys, 1000), l)
	cv.wait(convergeTimeout, l, 0, 1)
	start := time.Now()
	for _, n := range c.nodes {
		id := n.spec.ID
		eventually(t, convergeTimeout, fmt.Sprintf("%d rounds of %s with L since A holds every key", lyingRounds, id), func() error {
			if got := len(since(f.roundsOf(id), start)); got < lyingRounds {
				return fmt.Errorf("%d rounds", got)
			}
			return nil
		})
	}
	for _, n := range c.nodes {
		id := n.spec.ID
		all := f.roundsOf(id)
		for i, r := range all {
			if r.entries > pushEntries || r.size > pushBytes+64<<10 {
				t.Errorf("%s's round %d with L pushed %d entries, %d bytes; want at most %d entries and %d bytes", id, i, r.entries, r.size, pushEntries, pushBytes)
			}
		}
		// Since A held every key, each round of n with L asks for all of them.
		var pushed, pushRounds, stamps int
		late := since(all, start)
		for _, r := range late {
			if r.pushes > 0 {
				pushRounds++
			}
			pushed += r.entries
			stamps += r.stampsBytes
		}
		if pushRounds > 1 || pushed > pushEntries {
			t.Errorf("%s pushed %d entries to L in %d of its last %d rounds with it; want at most %d in 1 (then held for 1m)", id, pushed, pushRounds, len(late), pushEntries)
		}
		cut, err := n.metric("fanout_sync_push_limited_total", `peer="`+f.addr+`"`, `reason="cut"`)
		if err != nil {
			t.Fatal(err)
		}
		held, err := n.metric("fanout_sync_push_limited_total", `peer="`+f.addr+`"`, `reason="held"`)
		if err != nil {
			t.Fatal(err)
		}
		// Read after the rounds above: one more may have ended; the last one seen may not.
		if cut < 1 || cut > 2 || int(held) < len(late)-pushRounds-1 {
			t.Errorf("%s: fanout_sync_push_limited_total{peer=L} cut %v, held %v; want cut 1 (2 if a round cut before the test's window), held >= %d (of %d rounds)",
				id, cut, held, len(late)-pushRounds-1, len(late))
		}
		// The first round with L once n held more than a round pushes was cut, and
		// pushed pushEntries; one before may have pushed a part.
		if p := pushedIn(all); p < pushEntries {
			t.Errorf("%s pushed %d entries to L in all, fewer than the %d of the round its metric counts as cut", id, p, pushEntries)
		}
		if warns := strings.Count(n.log(), warning); warns != 1 {
			t.Errorf("%s logged %d WARN lines %q in %s; want 1 (at most one per 30s)", id, warns, warning, ms(time.Since(start)))
		}
		t.Logf("%s's last %d rounds with L (each asking for all %d keys): %d entries pushed, in %d rounds; their Pull requests carried %d bytes of stamps; "+
			"all %d rounds: %d entries pushed; metric cut %v, held %v",
			id, len(late), keys, pushed, pushRounds, stamps, len(all), pushedIn(all), cut, held)
	}
	cv.wait(convergeTimeout, l, 0, 1)
}

// pushedIn sums the entries pushed in rs.
func pushedIn(rs []fakeRound) int {
	n := 0
	for _, r := range rs {
		n += r.entries
	}
	return n
}

// since returns the rounds that began at or after t.
func since(rs []fakeRound, t time.Time) []fakeRound {
	return slices.DeleteFunc(slices.Clone(rs), func(r fakeRound) bool { return r.at.Before(t) })
}
