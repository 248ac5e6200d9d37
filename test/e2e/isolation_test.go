package e2e

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// Tests that one reader, or its absence, costs only itself (a reader that
// falls behind is coalesced per key and never blocks another reader, a sender or
// Replicate; BUSY only where the state table cannot take a write).

// The workload of TestFrozenSubscriber: A and B each submit frozenTasks new tasks of
// frozenPayload bytes, back to back in requests of frozenBatch. Its 3 MiB are ~50
// times what a frozen watcher's 64 KiB windows take, so the node must hold what it
// owes the frozen watcher while it serves the other subscriber.
const (
	frozenTasks   = 1500
	frozenPayload = 1 << 10
	frozenBatch   = 100
	// frozenPairs is how many interleaved runs of each kind there are; their medians
	// are compared. 9: with 5, one or two disturbed runs of a kind moved its median,
	// and the ratio of the medians ranged 0.64-1.78 over 17 runs of this test at the
	// builds a8db48a and 453c0e0, alike on this path (2026-11-23); with 9, 0.78-1.21 over 6.
	frozenPairs = 9
	// frozenRatio is the speed target: the other subscriber's delivery time with a
	// frozen subscriber on the node is within 1.2x of its time without. It is a
	// benchmark figure, checked by `make bench-isolation` (E2E_TIMING=1) on a quiet
	// machine, not by `make test`: a ratio of wall-clock times measures the machine's
	// other load as much as the node. Under two CPU hogs the medians of 9 pairs came
	// out 1.33 apart (304 against 406 ms) with the runs of the two kinds overlapping
	// (265-426 against 224-467 ms), while nothing was held up: the isolation itself is
	// asserted on every run (see frozenSlack), the ratio is logged.
	frozenRatio = 1.2
	// frozenSlack is added to the bound. A run takes 100-250 ms on the 2-core VM
	// (350-800 ms with -race), where five processes (three nodes, the watcher, the
	// test) share two cores with whatever else runs: one scheduling delay or GC cycle
	// in any of them moves a run by tens of milliseconds either way, which is noise,
	// not a stall (runs of one kind in one test spread over 2x). A subscriber held up
	// by the frozen one would not finish at all before SIGCONT, which comes only once
	// it has finished: the run would fail on its deadline.
	frozenSlack = 25 * time.Millisecond
)

// timingChecks turns on the assertions of wall-clock speed targets (E2E_TIMING=1, set by
// `make bench-isolation`): figures for a quiet machine, which `make test` and `make
// test-stress` only log, since they run wherever CI runs, loaded or not.
var timingChecks = os.Getenv("E2E_TIMING") == "1"

// TestFrozenSubscriber runs a Subscribe client in a process of its own on C
// (internal/watcher) next to the test's own subscriber on C, and freezes the watcher
// with SIGSTOP for every other run of a fixed workload (A and B submit 3000 new
// 1 KiB tasks). The other subscriber's delivery time (first submit until it had every
// task) with the frozen watcher is within 1.2x (plus frozenSlack) of the runs without
// a fault, interleaved, medians compared (asserted with E2E_TIMING=1, logged always). (Without the fault the watcher reads too,
// which costs some CPU: that is the no-fault state.) The frozen watcher really was
// held back: it receives most of the run after SIGCONT, and then every task at its
// latest. Neither C nor its peers count a refused write or congestion.
func TestFrozenSubscriber(t *testing.T) {
	c := startCluster(t, specs(3)...)
	w := startWatcher(t, c, 2, subOpts{maxBatch: 64})
	other := subscribeWith(t, c, 2, subOpts{maxBatch: 64})
	before := isolationCounters(t, c, 2)

	run := func(name string, freeze bool) time.Duration {
		t.Helper()
		exp := newExpectations()
		reqs := map[int][][]*fanoutv1.Event{
			0: sized(updates(name+"/A/", frozenTasks, 1, frozenBatch), frozenPayload),
			1: sized(updates(name+"/B/", frozenTasks, 1, frozenBatch), frozenPayload),
		}
		if freeze {
			w.signal(syscall.SIGSTOP)
		}
		start := time.Now()
		startPaced(t, c, reqs, 0, exp).wait(t)
		want := exp.snapshot()
		took := waitLatest(t, convergeTimeout, want, other).Sub(start)
		resumed := time.Now()
		if freeze {
			w.signal(syscall.SIGCONT)
		}
		waitLatest(t, convergeTimeout, stampsOnly(want), w.rec)
		if late := w.rec.countSince(resumed); freeze && late < len(want)/2 {
			t.Errorf("%s: the frozen watcher received %d of %d tasks after SIGCONT: the node was not holding them for it", name, late, len(want))
		}
		return took
	}
	run("warm-up", false)
	var base, frozen []time.Duration
	for i := range frozenPairs {
		base = append(base, run(fmt.Sprintf("base-%d", i), false))
		frozen = append(frozen, run(fmt.Sprintf("frozen-%d", i), true))
	}
	b, f := median(base), median(frozen)
	t.Logf("other subscriber on C, %d events per run: delivery without a fault %v (median %s), with the watcher frozen %v (median %s): ratio %.2f",
		2*frozenTasks, msAll(base), ms(b), msAll(frozen), ms(f), float64(f)/float64(b))
	if limit := time.Duration(float64(b)*frozenRatio) + frozenSlack; timingChecks && f > limit {
		t.Errorf("with a frozen subscriber on C the other one took %s (median), over %.1fx the %s without plus %s", ms(f), frozenRatio, ms(b), frozenSlack)
	}
	checkAllMonotonic(t, other, w.rec)
	if after := isolationCounters(t, c, 2); after != before {
		t.Errorf("the frozen subscriber pushed back: before %+v, after %+v", before, after)
	}
}

func msAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

// backpressure is what a node and its peers count of push-back from it.
type backpressure struct {
	Refused    uint64         // the node's state table: writes refused at a bound
	Congestion map[int]uint64 // each peer's congestion counter for the node
}

// isolationCounters reads the refused counter of node n and every other node's
// congestion counter for n, as a comparable string.
func isolationCounters(t *testing.T, c *cluster, n int) string {
	t.Helper()
	st, err := stateStatus(c.node(n))
	if err != nil {
		t.Fatal(err)
	}
	b := backpressure{Refused: st.GetRefused(), Congestion: make(map[int]uint64)}
	for i := range c.nodes {
		if i == n {
			continue
		}
		p, err := c.node(i).peerStatus(n)
		if err != nil {
			t.Fatal(err)
		}
		b.Congestion[i] = p.GetCongestion()
	}
	return fmt.Sprintf("%+v", b)
}

// TestPublishOnlyNode gives C an app that only publishes: no subscriber on C, ever.
// A and B write 12,000 distinct tasks, twice each (more than the 10,000 of the old
// inbox, which filled and then answered BUSY for good), and C writes 1,000 of its own,
// in a paced load. A and B count no congestion for C, C refuses nothing, and every
// node's state table (C's included) holds every task at its winner.
func TestPublishOnlyNode(t *testing.T) {
	c := startCluster(t, specs(3)...)
	l := newLedger()
	ld := startPaced(t, c, map[int][][]*fanoutv1.Event{
		0: updates("pub/A/", 6000, 2, 200),
		1: updates("pub/B/", 6000, 2, 200),
		2: updates("pub/C/", 1000, 2, 200),
	}, 25*time.Millisecond, l)
	start := time.Now()
	ld.wait(t)
	submitted := time.Since(start)
	winner, _ := l.snapshot()
	for _, n := range c.nodes {
		eventually(t, convergeTimeout, "node "+n.spec.ID+"'s state table holds every task", func() error {
			got, err := getPrefix(n, "pub/")
			if err != nil {
				return err
			}
			return diffState(n.spec.ID, got, winner, false)
		})
	}
	st, err := c.node(2).status()
	if err != nil {
		t.Fatal(err)
	}
	if st.GetSubscribers() != 0 || st.GetDelivered() != 0 {
		t.Errorf("C has %d subscribers and delivered %d entries, want none: it only publishes", st.GetSubscribers(), st.GetDelivered())
	}
	if k := st.GetState().GetKeys(); k != uint64(len(winner)) || k <= 10000 {
		t.Errorf("C's state table holds %d keys, want all %d (over the old inbox's 10000)", k, len(winner))
	}
	want := fmt.Sprintf("%+v", backpressure{Congestion: map[int]uint64{0: 0, 1: 0}})
	if got := isolationCounters(t, c, 2); got != want {
		t.Errorf("push-back from publish-only C: %s, want %s", got, want)
	}
	events, tasks := l.count()
	t.Logf("%d events over %d tasks submitted in %s (paced); C holds all %d keys with no subscriber, no refusal and no congestion at A or B",
		events, tasks, ms(submitted), st.GetState().GetKeys())
}
