package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Catch-up with real processes: a node that starts pulls the state from
// its peers before it reports ready (bootstrap), and anti-entropy rounds repair what
// the replication fast path lost.

// bootstrapReady is how soon a new node that pulls 10,000 keys must turn ready: "within
// a few seconds" (issue 10). A healthy run takes a fraction of a second.
const bootstrapReady = 5 * time.Second

// TestBootstrapNewNode starts A and B with C in their --peers while C is down, gives
// them 10,000 keys, then starts C for the first time.
//
//   - C is live at once, and ready (the named health service SERVING, GetStatus ready
//     with a reason) within bootstrapReady; at that moment Get on C returns every key
//     at the same (version, origin) as A, and what C pulled by bootstrap and what A
//     and B had replicated to it by then add up to every key.
//   - Restarted while its link to A answers nothing for 10s, C is live and takes
//     Submits, but stays NOT_SERVING (GetStatus ready false, "syncing"; fanout_ready
//     0) until --sync-timeout passes; then it is ready with every key, which it got
//     from B.
//
// Every node ends with every winner; no Subscribe stream sees a version go backwards.
func TestBootstrapNewNode(t *testing.T) {
	const keys = 10000
	c := newCluster(t, specs(3)...)
	a, b, cn := c.node(0), c.node(1), c.node(2)
	// C reaches A through a proxy, so that the second part can slow that link down.
	proxy := startProxy(t, "C-to-A", a.peerAddr)
	c.route(2, 0, proxy.Listen)
	a.launch()
	b.launch()
	a.waitReady()
	b.waitReady()
	cv := watch(t, c) // A and B; C is down
	l := newLedger()
	submit(t, c, 0, changes("bootstrap/", "v1", keys, 1000), l)
	cv.wait(convergeTimeout, l, 0, 1)
	winner, _ := l.snapshot()
	ids := slices.Sorted(maps.Keys(winner))

	cn.launch()
	live := cn.waitServing("")
	ready := cn.waitServing(readinessService)
	got, err := getIDs(cn, ids) // at once: ready means synced
	if err != nil {
		t.Fatal(err)
	}
	if err := diffState("C", got, winner, false); err != nil {
		t.Errorf("C is ready, but: %v", err)
	}
	fromA, err := getIDs(a, ids)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameStamps(got, fromA); err != nil {
		t.Errorf("C against A: %v", err)
	}
	if ready > bootstrapReady {
		t.Errorf("C was ready %s after its start, want within %s", ms(ready), bootstrapReady)
	}
	ok, reason, err := cn.readiness()
	if err != nil || !ok || !strings.Contains(reason, "synced with 2 of 2 peers") {
		t.Errorf("C's GetStatus: ready %t, reason %q (%v); want ready, synced with 2 of 2 peers", ok, reason, err)
	}
	in := syncInto(t, c, 2)
	var fast uint64
	for _, i := range []int{0, 1} {
		p, err := c.node(i).peerStatus(2)
		if err != nil {
			t.Fatal(err)
		}
		fast += p.GetSucceeded()
	}
	// Every key C holds came by a sync or by a Replicate; the latter are at most what
	// A and B count as delivered to C (read after C's Get).
	if in.total()+fast < keys {
		t.Errorf("C holds %d keys, but anti-entropy stored %d there and A and B replicated %d events to it", keys, in.total(), fast)
	}
	t.Logf("new node C: live %s and ready %s after its start (%q) with all %d keys at A's (version, origin); "+
		"sync into C: %s; A and B had replicated %d events to C by then; C's rounds: %s",
		ms(live), ms(ready), reason, keys, in, fast, syncSummary(t, c, 2))
	cv.open(2, subOpts{snapshot: true})
	cv.wait(convergeTimeout, l, 0, 1, 2)

	// C again, while A's answers to it take 10s: readiness waits for --sync-timeout.
	cn.kill()
	const syncTimeout = 3 * time.Second
	cn.setFlag("--sync-timeout", syncTimeout.String())
	addToxic(t, proxy, `{"name":"slow","type":"latency","stream":"upstream","attributes":{"latency":10000}}`)
	cn.launch()
	live = cn.waitServing("")
	if st, err := cn.healthOf(readinessService); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("C live %s after its start with A's link slow: health %q %s (%v), want NOT_SERVING until bootstrap ends", ms(live), readinessService, st, err)
	}
	if ok, reason, err := cn.readiness(); ok || !strings.Contains(reason, "(bootstrap)") {
		t.Errorf("C's GetStatus while it bootstraps: ready %t, reason %q (%v); want not ready, syncing (bootstrap)", ok, reason, err)
	}
	if v, err := cn.metric("fanout_ready"); err != nil || v != 0 {
		t.Errorf("C's fanout_ready while it bootstraps: %v (%v), want 0", v, err)
	}
	resp := submitResp(t, c, 2, &fanoutv1.SubmitRequest{Events: changes("bootstrap/while-syncing/", "C", 1, 1)[0]}, l)
	if r := resp.GetResults()[0].GetOutcome(); r != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
		t.Errorf("Submit to C while it bootstraps: %s, want ACCEPTED", r)
	}
	ready = cn.waitServing(readinessService)
	ok, reason, err = cn.readiness()
	if err != nil || !ok || !strings.Contains(reason, fmt.Sprintf("--sync-timeout %s passed; synced with 1 of 2 peers", syncTimeout)) {
		t.Errorf("C's GetStatus after --sync-timeout: ready %t, reason %q (%v); want ready, the timeout passed, synced with 1 of 2 peers", ok, reason, err)
	}
	if ready < syncTimeout {
		t.Errorf("C was ready %s after its start, before its --sync-timeout %s, with A not answering", ms(ready), syncTimeout)
	}
	if v, err := cn.metric("fanout_ready"); err != nil || v != 1 {
		t.Errorf("C's fanout_ready once ready: %v (%v), want 1", v, err)
	}
	winner, _ = l.snapshot()
	got, err = getIDs(cn, slices.Sorted(maps.Keys(winner)))
	if err != nil {
		t.Fatal(err)
	}
	if err := diffState("C", got, winner, false); err != nil {
		t.Errorf("C is ready after --sync-timeout, synced with B, but: %v", err)
	}
	t.Logf("C with A's answers 10s late: live %s, ready %s after its start (%q); it took a Submit meanwhile; sync into C: %s; A and B had replicated %d events to C (queued while C was first down)",
		ms(live), ms(ready), reason, syncInto(t, c, 2), peerOf(t, a, 2).GetSucceeded()+peerOf(t, b, 2).GetSucceeded())
	if err := proxy.Toxics.RemoveToxic(context.Background(), "slow"); err != nil {
		t.Fatal(err)
	}
	cv.open(2, subOpts{snapshot: true})
	cv.wait(convergeTimeout, l, 0, 1, 2)
}

// Timings of TestAntiEntropyRepairsOverflow.
const (
	overflowKeys   = 12000
	overflowBuffer = 1000 // --max-buffer: A keeps at most this many events for a peer
	aeInterval     = 2 * time.Second
	// aeRepair bounds a repair by anti-entropy: three intervals. The node's own next
	// round comes within 1.25 intervals (jitter), with a peer that has every key.
	aeRepair = 3 * aeInterval
)

// TestAntiEntropyRepairsOverflow changes 12,000 keys (more than --max-buffer) from A
// while B cannot take them, twice:
//
//   - B killed with kill -9: once restarted, B is ready within aeRepair, and at that
//     moment holds every key's latest (version, origin). Bootstrap repaired it: the
//     keys it pulled, plus what A's queue still held for it, are every key.
//   - B frozen with SIGSTOP (its process lives on, with the older versions) while
//     A changes 12,000 keys, one in ten a deletion: A's queue for B overflows, and
//     once B resumes, periodic anti-entropy rounds (its bootstrap is long over) give
//     it every key's latest within aeRepair, tombstones included. The keys
//     stored at B by sync rounds are at least the events A's queue evicted, and
//     /metrics fanout_sync_keys_repaired_total agrees with GetStatus.
//
// Every node ends with every winner; no Subscribe stream sees a version go backwards.
func TestAntiEntropyRepairsOverflow(t *testing.T) {
	c := startCluster(t, specs(3, fmt.Sprintf("--max-buffer=%d", overflowBuffer), "--anti-entropy-interval="+aeInterval.String(),
		"--breaker-open=500ms", "--network-failure-retry-delay=200ms")...)
	a, b := c.node(0), c.node(1)
	cv := watch(t, c)
	l := newLedger()
	submit(t, c, 0, changes("overflow/", "v1", overflowKeys, 1000), l)
	cv.wait(convergeTimeout, l, 0, 1, 2)
	winner, _ := l.snapshot()
	ids := slices.Sorted(maps.Keys(winner))

	// kill -9.
	b.kill()
	ov0 := peerOf(t, a, 1).GetOverflow()
	submit(t, c, 0, changes("overflow/", "v2", overflowKeys, 1000), l)
	waitOverflow(t, a, 1, ov0)
	sent0 := peerOf(t, a, 1).GetSucceeded()
	in0 := syncInto(t, c, 1) // B is down: its peers' pushes only; its new process counts from zero
	start := time.Now()
	took := cv.restart(1)
	got, err := getIDs(b, ids) // at once: ready means synced
	if err != nil {
		t.Fatal(err)
	}
	held := time.Since(start)
	winner, _ = l.snapshot()
	if err := diffState("B", got, winner, false); err != nil {
		t.Errorf("B is ready %s after its restart began, but: %v", ms(took), err)
	}
	if held > aeRepair {
		t.Errorf("B held every key %s after its restart began, want within %s", ms(held), aeRepair)
	}
	in := syncInto(t, c, 1).minus(in0)
	pa := peerOf(t, a, 1)
	sent := pa.GetSucceeded() - sent0
	if in.total()+sent < overflowKeys {
		t.Errorf("B holds %d keys, but sync stored %d there and A replicated %d events to it since its restart", overflowKeys, in.total(), sent)
	}
	_, reason, _ := b.readiness()
	t.Logf("kill -9: A's queue for B evicted %d of %d changes (overflow); B, restarted, was ready %s and held every key %s after the restart began (%q); "+
		"repaired by bootstrap: sync into B %s; A replicated %d events to B since; B's rounds: %s",
		pa.GetOverflow()-ov0, overflowKeys, ms(took), ms(held), reason, in, sent, syncSummary(t, c, 1))
	cv.wait(convergeTimeout, l, 0, 1, 2)

	// SIGSTOP: B lives on, and misses what A's queue cannot hold. A's queue for B is
	// empty first (it held older changes for B while B was down), so that every event
	// it evicts is a key's only change of this round.
	waitDrained(t, a, 1)
	in0 = syncInto(t, c, 1)
	ov0 = peerOf(t, a, 1).GetOverflow()
	b.signal(syscall.SIGSTOP)
	submit(t, c, 0, deleteEvery(changes("overflow/", "v3", overflowKeys, 1000), 10), l)
	waitOverflow(t, a, 1, ov0)
	b.signal(syscall.SIGCONT)
	resumed := time.Now()
	winner, _ = l.snapshot()
	eventually(t, aeRepair, "B holds every key's latest after SIGCONT", func() error {
		got, err := getIDs(b, ids)
		if err != nil {
			return err
		}
		return diffState("B", got, winner, false)
	})
	repairedIn := time.Since(resumed)
	cv.wait(convergeTimeout, l, 0, 1, 2)
	in = syncInto(t, c, 1).minus(in0)
	evicted := peerOf(t, a, 1).GetOverflow() - ov0
	// An evicted event never reaches B by Replicate (each key changed once): B got
	// each of those keys from a sync round, which counts it once as stored.
	if in.total() < evicted {
		t.Errorf("sync rounds stored %d keys at B, fewer than the %d events A's queue for B evicted (%s)", in.total(), evicted, in)
	}
	checkSyncMetrics(t, c, 1)
	t.Logf("SIGSTOP: A's queue for B evicted %d of %d changes (%d deletions among the changes); B had every key %s after SIGCONT (anti-entropy interval %s); "+
		"repaired by anti-entropy rounds: sync into B %s; B's rounds: %s",
		evicted, overflowKeys, overflowKeys/10, ms(repairedIn), aeInterval, in, syncSummary(t, c, 1))
}

// changes returns n events in requests of batch: task prefix+"%05d", payload
// "<task>@<label>".
func changes(prefix, label string, n, batch int) [][]*fanoutv1.Event {
	var reqs [][]*fanoutv1.Event
	for i := 0; i < n; i += batch {
		var events []*fanoutv1.Event
		for k := i; k < min(i+batch, n); k++ {
			id := fmt.Sprintf("%s%05d", prefix, k)
			events = append(events, &fanoutv1.Event{TaskId: id, Payload: []byte(id + "@" + label)})
		}
		reqs = append(reqs, events)
	}
	return reqs
}

// deleteEvery turns every k-th event of reqs into a deletion of its task.
func deleteEvery(reqs [][]*fanoutv1.Event, k int) [][]*fanoutv1.Event {
	i := 0
	for _, events := range reqs {
		for _, ev := range events {
			if i%k == 0 {
				ev.Payload, ev.Deleted = nil, true
			}
			i++
		}
	}
	return reqs
}

// sameStamps returns an error naming the first task (in sorted order) whose stamp
// differs between two state tables, or that only one holds.
func sameStamps(got, want map[string]stateEntry) error {
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[id]; !ok || g.Stamp != want[id].Stamp {
			return fmt.Errorf("task %q: %s (held %t), want %s", id, g.Stamp, ok, want[id].Stamp)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d tasks, want %d", len(got), len(want))
	}
	return nil
}

// peerOf returns n's PeerStatus for node to, failing the test on error.
func peerOf(t *testing.T, n *node, to int) *fanoutv1.PeerStatus {
	t.Helper()
	p, err := n.peerStatus(to)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitOverflow waits until n's queue for node to has taken every submitted event in
// and evicted some beyond before (its overflow counter): the fast path has lost them.
func waitOverflow(t *testing.T, n *node, to int, before uint64) {
	t.Helper()
	eventually(t, convergeTimeout, fmt.Sprintf("%s's queue for node %d overflows", n.spec.ID, to), func() error {
		p, err := n.peerStatus(to)
		if err == nil && (p.GetOverflow() == before || p.GetAcceptorQueue() != 0) {
			err = fmt.Errorf("overflow %d (was %d), acceptor queue %d, pending %d", p.GetOverflow(), before, p.GetAcceptorQueue(), p.GetPending())
		}
		return err
	})
}

// waitDrained waits until n's queue for node to is empty: nothing waiting, in
// flight or to be retried.
func waitDrained(t *testing.T, n *node, to int) {
	t.Helper()
	eventually(t, convergeTimeout, fmt.Sprintf("%s's queue for node %d empty", n.spec.ID, to), func() error {
		p, err := n.peerStatus(to)
		if err == nil && p.GetPending()+p.GetInFlight()+p.GetAcceptorQueue()+p.GetReprocessQueue() != 0 {
			err = fmt.Errorf("pending %d, in flight %d, acceptor queue %d, reprocess queue %d, breaker %s",
				p.GetPending(), p.GetInFlight(), p.GetAcceptorQueue(), p.GetReprocessQueue(), p.GetBreaker())
		}
		return err
	})
}

// syncIn counts the entries sync rounds stored at one node: pulled by its own rounds,
// and pushed to it by its peers' rounds.
type syncIn struct{ pulled, pushed uint64 }

func (s syncIn) total() uint64 { return s.pulled + s.pushed }

func (s syncIn) minus(o syncIn) syncIn { return syncIn{s.pulled - o.pulled, s.pushed - o.pushed} }

func (s syncIn) String() string {
	return fmt.Sprintf("%d entries (%d pulled by its rounds, %d pushed by its peers')", s.total(), s.pulled, s.pushed)
}

// syncInto returns what sync rounds stored at node i, from every running node's
// GetStatus (pulled is 0 while node i is down).
func syncInto(t *testing.T, c *cluster, i int) syncIn {
	t.Helper()
	var s syncIn
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		st, err := n.status()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.GetPeers() {
			switch {
			case n.index == i:
				s.pulled += p.GetSync().GetPulled()
			case p.GetAddress() == n.peers[i]:
				s.pushed += p.GetSync().GetPushed()
			}
		}
	}
	return s
}

// syncSummary describes node i's rounds with each peer (GetStatus PeerStatus.sync).
func syncSummary(t *testing.T, c *cluster, i int) string {
	t.Helper()
	n := c.node(i)
	st, err := n.status()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range st.GetPeers() {
		s := p.GetSync()
		out = append(out, fmt.Sprintf("with %s %d rounds (%d failed), pulled %d, pushed %d, %d bytes (%d of digests), last %s over %d leaves",
			c.nameAt(n, p.GetAddress()), s.GetRounds(), s.GetFailed(), s.GetPulled(), s.GetPushed(), s.GetBytes(), s.GetDigestBytes(),
			ms(s.GetLastDuration().AsDuration()), s.GetLastLeaves()))
	}
	return strings.Join(out, "; ")
}

// nameAt returns the id of the node that n reaches at addr.
func (c *cluster) nameAt(n *node, addr string) string {
	for i, a := range n.peers {
		if a == addr && i < len(c.nodes) { // a test's fake peer is not a node
			return c.node(i).spec.ID
		}
	}
	return addr
}

// checkSyncMetrics checks that /metrics fanout_sync_keys_repaired_total agrees with
// GetStatus on what sync stored at node i: its pulled, and each peer's pushed to it.
// Call it once the cluster is in sync (no round is storing anything).
func checkSyncMetrics(t *testing.T, c *cluster, i int) {
	t.Helper()
	for _, n := range c.nodes {
		st, err := n.status()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.GetPeers() {
			dir, want := "pushed", p.GetSync().GetPushed()
			if n.index == i {
				dir, want = "pulled", p.GetSync().GetPulled()
			} else if p.GetAddress() != n.peers[i] {
				continue
			}
			got, err := n.metric("fanout_sync_keys_repaired_total", `peer="`+p.GetAddress()+`"`, `direction="`+dir+`"`)
			if err != nil {
				t.Error(err)
			} else if uint64(got) != want {
				t.Errorf("node %s, peer %s: fanout_sync_keys_repaired_total{direction=%q} %v, GetStatus says %d", n.spec.ID, c.nameAt(n, p.GetAddress()), dir, got, want)
			}
		}
	}
}

// TestAntiEntropyPastFrozenPeer freezes C (SIGSTOP) with A's and B's connections to it
// up, for long enough that A's and B's rounds, which take their peers in turn, come
// to C. Then B misses changes: frozen a moment while A changes 12,000 keys, A's queue
// for it overflows. With C still frozen, B must get every change from A by
// anti-entropy within frozenPeerRepair: a peer that does not answer holds up the
// rounds with it, not a node's rounds with every other peer.
func TestAntiEntropyPastFrozenPeer(t *testing.T) {
	const interval = time.Second
	c := startCluster(t, specs(3, fmt.Sprintf("--max-buffer=%d", overflowBuffer), "--anti-entropy-interval="+interval.String(),
		"--replicate-timeout=1s", "--breaker-open=500ms", "--network-failure-retry-delay=200ms")...)
	a, b, cn := c.node(0), c.node(1), c.node(2)
	cv := watch(t, c)
	for _, n := range []*node{a, b} {
		eventually(t, convergeTimeout, n.spec.ID+" completes a round with C", func() error {
			p, err := n.peerStatus(2)
			if err == nil && p.GetSync().GetLastSuccess() == nil {
				err = fmt.Errorf("sync with C: %v", p.GetSync())
			}
			return err
		})
	}
	cn.signal(syscall.SIGSTOP)
	// The fault's duration: rounds come every interval ±25 %, each with the next peer,
	// so within three intervals A's and B's next round is with C.
	<-time.After(3 * interval)
	b.signal(syscall.SIGSTOP)
	ov0 := peerOf(t, a, 1).GetOverflow()
	l := newLedger()
	submit(t, c, 0, changes("frozenpeer/", "v1", overflowKeys, 1000), l)
	waitOverflow(t, a, 1, ov0)
	b.signal(syscall.SIGCONT)
	resumed := time.Now()
	winner, _ := l.snapshot()
	ids := slices.Sorted(maps.Keys(winner))
	// A round with frozen C fails after --replicate-timeout (1s); the next round, at
	// most 1.25 intervals later, is with the other peer. A and B each get there.
	const frozenPeerRepair = 2*time.Second + 3*interval
	eventually(t, frozenPeerRepair, "B has every change, C still frozen", func() error {
		got, err := getIDs(b, ids)
		if err != nil {
			return err
		}
		return diffState("B", got, winner, false)
	})
	repairedIn := time.Since(resumed)
	evicted := peerOf(t, a, 1).GetOverflow() - ov0
	t.Logf("C frozen: A's queue for B evicted %d of %d changes; B had every key %s after SIGCONT; A's rounds: %s; B's rounds: %s",
		evicted, overflowKeys, ms(repairedIn), syncSummary(t, c, 0), syncSummary(t, c, 1))
	cn.signal(syscall.SIGCONT)
	cv.wait(convergeTimeout, l, 0, 1, 2)
}
