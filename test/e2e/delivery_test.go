package e2e

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// convergeTimeout bounds how long peers may take to reach the latest version of every
// task after the load was submitted. A healthy run needs well under a second.
const convergeTimeout = 30 * time.Second

// TestDelivery submits to A and checks that B and C each end with the latest version
// and payload of every task, and that A's own subscriber gets nothing back (no echo).
// It logs the time from the first submit until both peers had everything.
func TestDelivery(t *testing.T) {
	c := startCluster(t, specs(3)...)
	cases := []struct {
		name          string
		tasks, rounds int
		batch         int // events per request
		streamRounds  int // the last rounds go through SubmitStream, the rest through Submit
	}{
		{name: "200 tasks x 5 updates via Submit and SubmitStream", tasks: 200, rounds: 5, batch: 50, streamRounds: 2},
		{name: "1000 unique tasks via Submit", tasks: 1000, rounds: 1, batch: 100},
		{name: "1000 unique tasks via SubmitStream", tasks: 1000, rounds: 1, batch: 100, streamRounds: 1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("delivery/%d/", i)
			recA, recB, recC := subscribe(t, c, 0, prefix), subscribe(t, c, 1, prefix), subscribe(t, c, 2, prefix)
			reqs := updates(prefix, tc.tasks, tc.rounds, tc.batch)
			split := len(reqs) - tc.streamRounds*((tc.tasks+tc.batch-1)/tc.batch)
			exp := newExpectations()

			start := time.Now()
			submit(t, c, 0, reqs[:split], exp)
			if err := submitStream(c.client(0), "A", reqs[split:], exp); err != nil {
				t.Fatal(err)
			}
			submitted := time.Since(start)
			want := exp.snapshot()
			if len(want) != tc.tasks || exp.count() != tc.tasks*tc.rounds {
				t.Fatalf("submitted %d events over %d tasks, want %d over %d", exp.count(), len(want), tc.tasks*tc.rounds, tc.tasks)
			}
			doneAt := waitLatest(t, convergeTimeout, want, recB, recC)
			t.Logf("%d events over %d tasks: submitted in %s; both peers had every task's latest version %s after the first submit",
				exp.count(), tc.tasks, submitted.Round(time.Millisecond), doneAt.Sub(start).Round(time.Millisecond))

			checkAllMonotonic(t, recB, recC)
			checkOrigins(t, "A", recB, recC)
			checkNoEcho(t, c, prefix, recA)
		})
	}
}

// checkOrigins fails the test if a recorder got an event that origin did not submit:
// a replicated event is never sent on (one hop).
func checkOrigins(t *testing.T, origin string, rs ...*recorder) {
	t.Helper()
	for _, r := range rs {
		for _, d := range r.deliveries() {
			if d.Stamp.Origin != origin {
				t.Errorf("%s: task %q came from %q, want only %q", r.name, d.TaskID, d.Stamp.Origin, origin)
				break
			}
		}
	}
}

// checkNoEcho checks that recA, a subscriber on A (node 0), received nothing of A's
// own load: B submits a marker, and once the marker has reached recA, the marker must
// be all recA ever got.
func checkNoEcho(t *testing.T, c *cluster, prefix string, recA *recorder) {
	t.Helper()
	marker := newExpectations()
	submit(t, c, 1, event(prefix+"marker-from-B", "marker"), marker)
	waitLatest(t, convergeTimeout, marker.snapshot(), recA)
	if got := recA.deliveries(); len(got) != 1 {
		t.Errorf("%s received %d events, want only B's marker; first: %+v", recA.name, len(got), got[0])
	}
}

// TestVersionsNeverGoBackwards runs loads with many updates per task, from concurrent
// submitters and from two origins, and checks at every subscriber that no task's
// version ever goes backwards (or repeats), and that all converge to the newest
// (version, origin) of every task.
func TestVersionsNeverGoBackwards(t *testing.T) {
	cases := []struct {
		name    string
		flags   []string
		origins []int // one submitter goroutine per entry, submitting to that node
		tasks   int
		rounds  int
	}{
		{name: "one origin, 4 concurrent submitters", origins: []int{0, 0, 0, 0}, tasks: 40, rounds: 25},
		{name: "one origin, small batches, 2 workers", flags: []string{"--max-batch=8", "--workers=2"}, origins: []int{0, 0, 0}, tasks: 40, rounds: 25},
		{name: "two origins on the same tasks", origins: []int{0, 0, 1, 1}, tasks: 40, rounds: 25},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, specs(3, tc.flags...)...)
			recs := []*recorder{subscribe(t, c, 0, ""), subscribe(t, c, 1, ""), subscribe(t, c, 2, "")}
			exp := newExpectations()
			runSubmitters(t, c, tc.origins, updates("mono/", tc.tasks, tc.rounds, 10), exp)
			want := exp.snapshot()

			// Every node converges to the newest stamp of each task, except that a
			// node never receives its own events back: it holds them already.
			for i, r := range recs {
				self := c.node(i).spec.ID
				waitLatest(t, convergeTimeout, filter(want, func(e expected) bool { return e.Stamp.Origin != self }), r)
			}
			checkAllMonotonic(t, recs...)
			var got []int
			for _, r := range recs {
				got = append(got, r.count())
			}
			t.Logf("%d events over %d tasks; deliveries per subscriber A,B,C: %v", exp.count(), len(want), got)
		})
	}
}

// runSubmitters submits reqs from one goroutine per entry of origins, concurrently,
// each to its node, and waits for all of them.
func runSubmitters(t *testing.T, c *cluster, origins []int, reqs [][]*fanoutv1.Event, exp observer) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(origins))
	for _, n := range origins {
		cli, origin := c.client(n), c.node(n).spec.ID
		wg.Go(func() { errs <- submitAll(cli, origin, reqs, exp) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFullStateTablePushesBack is what "a full inbox pushes back with BUSY" became
// with the state table (BUSY only where the state table cannot take a
// write). C's table is bounded at 20 keys while A and B write 40 tasks, 25 updates
// each, from two submitters each. C takes 18 keys (the peers' share: 2 are kept for
// C's own app), then answers BUSY for every new key, so A and B count congestion for
// C and keep the refused events; the updates of the 18 keys C holds still go
// through, and C's app gets each at its winner. No
// stream sees a version go backwards. Restarted with a bigger bound, C gets the
// refused keys from A's and B's retries, and the convergence checker passes.
func TestFullStateTablePushesBack(t *testing.T) {
	const tasks, bound = 40, 20
	ss := specs(3, "--congestion-retry-delay=10ms")
	ss[2].Flags = append(ss[2].Flags, fmt.Sprintf("--state-max-keys=%d", bound))
	c := startCluster(t, ss...)
	cv := watch(t, c)
	l := newLedger()
	runSubmitters(t, c, []int{0, 0, 1, 1}, updates("bound/", tasks, 25, 10), l)

	for _, from := range []int{0, 1} {
		eventually(t, convergeTimeout, c.node(from).spec.ID+" counts congestion for C", func() error {
			p, err := c.node(from).peerStatus(2)
			if err == nil && p.GetCongestion() == 0 {
				err = fmt.Errorf("congestion 0, succeeded %d, pending %d", p.GetSucceeded(), p.GetPending())
			}
			return err
		})
	}
	note := waitAtBound(t, c.node(2), "bound/", bound, peerShare(bound), l)
	held, err := getPrefix(c.node(2), "bound/")
	if err != nil {
		t.Fatal(err)
	}
	winner, _ := l.snapshot()
	heldWinners := make(map[string]expected, len(held))
	for id := range held {
		heldWinners[id] = winner[id]
	}
	waitLatest(t, convergeTimeout, heldWinners, cv.streams[2][0]) // C's app got them
	// A and B converge meanwhile: C's bound holds nobody else up.
	cv.wait(convergeTimeout, l, 0, 1)
	for _, i := range []int{0, 1} {
		if st, err := stateStatus(c.node(i)); err != nil || st.GetRefused() != 0 {
			t.Errorf("node %s refused %d writes (%v), want 0", c.node(i).spec.ID, st.GetRefused(), err)
		}
	}

	if code := c.node(2).stop(); code != 0 {
		t.Errorf("C exited %d after SIGTERM, want 0", code)
	}
	c.node(2).setFlag("--state-max-keys", "1000")
	start := time.Now()
	cv.restart(2)
	done := cv.wait(convergeTimeout, l, 0, 1, 2)
	events, _ := l.count()
	t.Logf("%d events over %d tasks; %s; restarted with a bigger bound, C had every winner %s after its restart began",
		events, tasks, note, done.Sub(start).Round(time.Millisecond))
}

func filter(m map[string]expected, keep func(expected) bool) map[string]expected {
	out := make(map[string]expected)
	for k, v := range m {
		if keep(v) {
			out[k] = v
		}
	}
	return out
}

// TestCoalescingWhenPeerIsFrozen freezes C with SIGSTOP while A takes many updates of
// a few tasks: A's queue for C coalesces them (GetStatus shows overridden > 0), B
// keeps up meanwhile (bulkhead), and after SIGCONT C converges to the latest versions
// having received fewer events than were submitted.
func TestCoalescingWhenPeerIsFrozen(t *testing.T) {
	c := startCluster(t, specs(3)...)
	recB, recC := subscribe(t, c, 1, "coalesce/"), subscribe(t, c, 2, "coalesce/")

	// Warm up, so A's connections to both peers are established before C freezes.
	warm := newExpectations()
	submit(t, c, 0, event("coalesce/warm-up", "hello"), warm)
	waitLatest(t, convergeTimeout, warm.snapshot(), recB, recC)

	c.node(2).signal(syscall.SIGSTOP)
	exp := newExpectations()
	submit(t, c, 0, updates("coalesce/hot/", 10, 200, 10), exp)
	want := exp.snapshot()

	var overridden uint64
	eventually(t, 10*time.Second, "A's queue for frozen C coalesces", func() error {
		p, err := c.node(0).peerStatus(2)
		if err != nil {
			return err
		}
		if overridden = p.GetOverridden(); overridden == 0 {
			return fmt.Errorf("peer C: overridden 0, pending %d, in flight %d", p.GetPending(), p.GetInFlight())
		}
		return nil
	})
	waitLatest(t, convergeTimeout, want, recB) // B is not held up by C
	if got := recC.count(); got != 1 {
		t.Fatalf("frozen C delivered %d events, want only the warm-up", got)
	}

	c.node(2).signal(syscall.SIGCONT)
	waitLatest(t, convergeTimeout, want, recC)
	checkAllMonotonic(t, recB, recC)
	gotC := recC.count() - 1
	t.Logf("%d events over %d tasks; A counted %d overridden for C while frozen; C received %d, B received %d",
		exp.count(), len(want), overridden, gotC, recB.count()-1)
	if gotC >= exp.count() {
		t.Errorf("C received %d events after SIGCONT, want fewer than the %d submitted (coalesced)", gotC, exp.count())
	}
}

// TestPeerRestart takes B down (SIGKILL or SIGTERM) while A takes a load: C keeps up
// meanwhile, A's breaker for B opens, and B, restarted on the same ports with empty
// state, converges once the breaker lets A's probe through.
func TestPeerRestart(t *testing.T) {
	cases := []struct {
		name string
		down func(*node)
	}{
		{"SIGKILL", (*node).kill},
		{"SIGTERM", func(n *node) {
			if code := n.stop(); code != 0 {
				t.Errorf("B exited %d after SIGTERM, want 0", code)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, specs(3, "--network-failure-retry-delay=100ms", "--breaker-open=300ms")...)
			recC := subscribe(t, c, 2, "")
			warm := newExpectations()
			submit(t, c, 0, event("restart/warm-up", "hello"), warm)
			waitLatest(t, convergeTimeout, warm.snapshot(), recC)

			tc.down(c.node(1))
			exp := newExpectations()
			submit(t, c, 0, updates("restart/", 200, 2, 50), exp)
			want := exp.snapshot()
			waitLatest(t, convergeTimeout, want, recC)
			eventually(t, convergeTimeout, "A's breaker for B opens", func() error {
				p, err := c.node(0).peerStatus(1)
				if err == nil && p.GetBreaker() != "open" {
					err = fmt.Errorf("breaker %q, transient %d", p.GetBreaker(), p.GetTransient())
				}
				return err
			})

			start := time.Now()
			c.node(1).restart()
			// With a snapshot: what A resent before the app subscribed is in it.
			recB := subscribeWith(t, c, 1, subOpts{snapshot: true})
			at := waitLatest(t, convergeTimeout, want, recB)
			checkAllMonotonic(t, recB, recC)
			t.Logf("B had every task %s after its restart began", at.Sub(start).Round(time.Millisecond))
		})
	}
}
