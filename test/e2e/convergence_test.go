package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// The convergence checker states the promises of last-writer-wins and of the state table over a whole
// cluster, whatever faults happened on the way:
//
//	(a) every live node's app ends with the same latest (version, origin) of every
//	    task: the newest stamp over all accepted submissions. A live stream does not
//	    carry the node's own writes back (its state table holds them), so what a
//	    node's app "has" is the newer of the latest delivery to it and the node's own
//	    newest write.
//	(a') every live node's state table (Get) holds that winner of every task, or
//	    omits the task if the winner is a deletion. A node restarted since the check
//	    began lost its memory-only state, and got it back from its peers: bootstrap
//	    and anti-entropy repair it, so it too must hold every winner.
//	(b) no Subscribe stream ever sees a task's version go backwards (or repeat), and
//	    its revisions rise (recorder.checkMonotonic).
//
// A ledger collects what the origins accepted (from SubmitResponse.versions and
// results); a convergence value records every delivery on every node, across restarts
// and reconnects, and checks a ledger against them and against each node's Get.

// ledger is what origins accepted, per task: the winning stamp and payload over all
// origins, and each origin's own newest stamp. Safe for concurrent submitters.
type ledger struct {
	mu     sync.Mutex
	winner map[string]expected         // guarded by mu; newest stamp over all origins
	own    map[string]map[string]stamp // guarded by mu; origin → task → its newest stamp
	events int                         // guarded by mu; events accepted
}

func newLedger() *ledger {
	return &ledger{winner: make(map[string]expected), own: make(map[string]map[string]stamp)}
}

// observe records a request that origin answered with resp: the events it accepted,
// with the versions it assigned.
func (l *ledger) observe(origin string, events []*fanoutv1.Event, resp *fanoutv1.SubmitResponse) error {
	ok, err := accepted(origin, events, resp)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	own := l.own[origin]
	if own == nil {
		own = make(map[string]stamp)
		l.own[origin] = own
	}
	for i, ev := range events {
		if !ok[i] {
			continue
		}
		l.events++
		id, s := ev.GetTaskId(), stamp{Version: resp.GetVersions()[i], Origin: origin}
		if cur, ok := l.winner[id]; !ok || s.newerThan(cur.Stamp) {
			l.winner[id] = expected{Stamp: s, Payload: ev.GetPayload(), Deleted: ev.GetDeleted()}
		}
		if s.newerThan(own[id]) {
			own[id] = s
		}
	}
	return nil
}

// count returns the number of events accepted and of distinct tasks.
func (l *ledger) count() (events, tasks int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.events, len(l.winner)
}

// snapshot returns a copy of the winners and of every origin's own stamps.
func (l *ledger) snapshot() (winner map[string]expected, own map[string]map[string]stamp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	winner = make(map[string]expected, len(l.winner))
	for k, v := range l.winner {
		winner[k] = v
	}
	own = make(map[string]map[string]stamp, len(l.own))
	for o, m := range l.own {
		own[o] = make(map[string]stamp, len(m))
		for k, v := range m {
			own[o][k] = v
		}
	}
	return winner, own
}

// convergence records every delivery on every node of a cluster: one Subscribe stream
// (prefix "") per node at a time, and every stream a node has had, so what a node's
// app received before a restart or a reconnect still counts. Methods are called from
// the test goroutine only.
type convergence struct {
	t       *testing.T
	c       *cluster
	streams [][]*recorder // per node index; the last one is current unless closed
}

// watch subscribes to every running node of c, with a snapshot: the app reads the
// node's current state, then every change (list+watch).
func watch(t *testing.T, c *cluster) *convergence {
	t.Helper()
	cv := &convergence{t: t, c: c, streams: make([][]*recorder, len(c.nodes))}
	for i, n := range c.nodes {
		if n.running() {
			cv.open(i, subOpts{snapshot: true})
		}
	}
	return cv
}

// open opens a new stream on node i.
func (cv *convergence) open(i int, o subOpts) {
	cv.t.Helper()
	r := subscribeWith(cv.t, cv.c, i, o)
	r.name = fmt.Sprintf("node %s stream #%d (%s)", cv.c.node(i).spec.ID, len(cv.streams[i])+1, o)
	cv.streams[i] = append(cv.streams[i], r)
}

// restart restarts node i (it must have exited), waits until it is ready (it has
// bootstrapped from its peers), and subscribes with a snapshot: whatever its peers
// sent it before the app connected is in the snapshot. It returns how long the node
// took to be ready.
func (cv *convergence) restart(i int) time.Duration {
	cv.t.Helper()
	start := time.Now()
	cv.c.node(i).restart()
	took := time.Since(start)
	cv.open(i, subOpts{snapshot: true})
	return took
}

// resume opens a new stream on node i from the last revision its previous stream
// (closed with disconnect) received: an app that reconnects loses nothing.
func (cv *convergence) resume(i int) {
	cv.t.Helper()
	rs := cv.streams[i]
	cv.open(i, subOpts{fromRevision: rs[len(rs)-1].lastRevision()})
}

// disconnect closes node i's current stream and waits until the node has no
// subscriber left. What the node had handed to that stream but the app had not
// received is lost to it; resume picks up after what it did receive.
func (cv *convergence) disconnect(i int) {
	cv.t.Helper()
	rs := cv.streams[i]
	r := rs[len(rs)-1]
	r.cancel()
	<-r.done
	eventually(cv.t, stepTimeout, r.name+" closed", func() error {
		if n := subscribers(cv.t, cv.c.node(i)); n != 0 {
			return fmt.Errorf("node reports %d subscribers", n)
		}
		return nil
	})
}

// has returns the newest delivery of task on node i over all its streams.
func (cv *convergence) has(i int, task string) (delivery, bool) {
	var best delivery
	found := false
	for _, r := range cv.streams[i] {
		r.mu.Lock()
		d, ok := r.latest[task]
		r.mu.Unlock()
		if ok && (!found || d.Stamp.newerThan(best.Stamp)) {
			best, found = d, true
		}
	}
	return best, found
}

// check returns nil if every node in live holds the winner of every task of l
// (invariant a), or an error naming the first task (in sorted order) and node that
// do not, and how many (task, node) pairs are behind.
func (cv *convergence) check(l *ledger, live []int) error {
	winner, own := l.snapshot()
	ids := slices.Sorted(maps.Keys(winner))
	var first error
	bad := 0
	for _, id := range ids {
		w := winner[id]
		for _, i := range live {
			if err := cv.checkTask(i, id, w, own[cv.c.node(i).spec.ID][id]); err != nil {
				if bad == 0 {
					first = err
				}
				bad++
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d (task, node) pairs of %d tasks x %d nodes not at the winner; first: %w", bad, len(ids), len(live), first)
	}
	return nil
}

// checkTask checks one task on node i, whose own newest write of it is own.
func (cv *convergence) checkTask(i int, id string, w expected, own stamp) error {
	if own == w.Stamp {
		return nil // the node wrote the winner itself
	}
	node := cv.c.node(i).spec.ID
	d, ok := cv.has(i, id)
	switch {
	case !ok && own == (stamp{}):
		return fmt.Errorf("node %s: task %q never arrived (winner %s)", node, id, w.Stamp)
	case !ok:
		return fmt.Errorf("node %s: task %q: nothing delivered, own write %s, winner %s", node, id, own, w.Stamp)
	case d.Stamp != w.Stamp:
		return fmt.Errorf("node %s: task %q delivered %s, own write %s, winner %s", node, id, d.Stamp, own, w.Stamp)
	case d.Deleted != w.Deleted:
		return fmt.Errorf("node %s: task %q at %s delivered with deleted=%t, want %t", node, id, d.Stamp, d.Deleted, w.Deleted)
	case w.Payload != nil && !bytes.Equal(d.Payload, w.Payload):
		return fmt.Errorf("node %s: task %q at %s has payload %q, want %q", node, id, d.Stamp, d.Payload, w.Payload)
	}
	return nil
}

// checkMonotonic returns the first stream that saw a version go backwards or repeat,
// or broke its revisions (invariant b). Streams are checked one by one: a restarted
// node starts with an empty state table, so across its processes only invariant (a)
// holds.
func (cv *convergence) checkMonotonic() error {
	for _, rs := range cv.streams {
		for _, r := range rs {
			if err := r.checkMonotonic(); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkState returns nil if the state table of every node in live agrees with l
// (invariant a'), or an error naming the first node and task that do not.
func (cv *convergence) checkState(l *ledger, live []int) error {
	winner, _ := l.snapshot()
	ids := slices.Sorted(maps.Keys(winner))
	for _, i := range live {
		n := cv.c.node(i)
		got, err := getIDs(n, ids)
		if err != nil {
			return err
		}
		if err := diffState(n.spec.ID, got, winner, false); err != nil {
			return err
		}
	}
	return nil
}

// wait polls until check(l, live) holds, then until checkState(l, live) holds, fails
// the test otherwise, then checks invariant (b). It returns when the last winning
// delivery arrived on any node of live (zero if every node wrote every winner
// itself).
func (cv *convergence) wait(timeout time.Duration, l *ledger, live ...int) time.Time {
	cv.t.Helper()
	_, tasks := l.count()
	eventually(cv.t, timeout, fmt.Sprintf("%d tasks converged on %d nodes", tasks, len(live)), func() error {
		return cv.check(l, live)
	})
	// A node updates its table before it hands the change to a stream, so this holds
	// at once; it is polled all the same, not assumed.
	eventually(cv.t, timeout, fmt.Sprintf("state tables of %d nodes hold the %d winners", len(live), tasks), func() error {
		return cv.checkState(l, live)
	})
	if err := cv.checkMonotonic(); err != nil {
		cv.t.Error(err)
	}
	var last time.Time
	for _, i := range live {
		if at := cv.completedAt(i, l); at.After(last) {
			last = at
		}
	}
	return last
}

// completedAt is when node i received the last winner of l that it did not write
// itself. Call it once check holds.
func (cv *convergence) completedAt(i int, l *ledger) time.Time {
	winner, _ := l.snapshot()
	var last time.Time
	for id, w := range winner {
		if d, ok := cv.has(i, id); ok && d.Stamp == w.Stamp && d.At.After(last) {
			last = d.At
		}
	}
	return last
}

// lags returns, sorted, how long each delivery on node i of a task in l took from
// its submission at the origin to the subscriber.
func (cv *convergence) lags(i int, l *ledger) []time.Duration {
	winner, _ := l.snapshot()
	var out []time.Duration
	for _, r := range cv.streams[i] {
		for _, d := range r.deliveries() {
			if _, ok := winner[d.TaskID]; ok && !d.Submitted.IsZero() {
				out = append(out, d.At.Sub(d.Submitted))
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// percentile returns the p-th percentile (0..100) of sorted durations, or 0.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// TestConvergenceChecker feeds the checker made-up deliveries (no processes) and
// checks that it accepts converged states and names the first task and node of a
// broken one.
func TestConvergenceChecker(t *testing.T) {
	a1, b2, b3 := stamp{1, "A"}, stamp{2, "B"}, stamp{3, "B"}
	// A wrote t1@1; B wrote t1@2 (the winner) and t2@3. C only receives.
	l := newLedger()
	ev := func(id, p string) *fanoutv1.Event { return &fanoutv1.Event{TaskId: id, Payload: []byte(p)} }
	must(t, l.observe("A", []*fanoutv1.Event{ev("t1", "a")}, acceptedAll(1)))
	must(t, l.observe("B", []*fanoutv1.Event{ev("t1", "b"), ev("t2", "b")}, acceptedAll(2, 3)))
	d := func(id string, s stamp, p string) delivery { return delivery{TaskID: id, Stamp: s, Payload: []byte(p)} }

	cases := []struct {
		name      string
		streams   [][][]delivery // node → stream → deliveries
		wantCheck string         // substring of check's error; "" for nil
		wantMono  string         // substring of checkMonotonic's error; "" for nil
	}{
		{name: "converged; B needs nothing of its own back",
			streams: [][][]delivery{{{d("t1", b2, "b"), d("t2", b3, "b")}}, {{d("t1", a1, "a")}}, {{d("t1", a1, "a"), d("t1", b2, "b"), d("t2", b3, "b")}}}},
		{name: "C never got t2",
			streams:   [][][]delivery{{{d("t1", b2, "b"), d("t2", b3, "b")}}, {{}}, {{d("t1", b2, "b")}}},
			wantCheck: `node C: task "t2" never arrived`},
		{name: "A stuck behind on t1",
			streams:   [][][]delivery{{{d("t2", b3, "b")}}, {{}}, {{d("t1", b2, "b"), d("t2", b3, "b")}}},
			wantCheck: `node A: task "t1": nothing delivered, own write (1, "A"), winner (2, "B")`},
		{name: "wrong payload",
			streams:   [][][]delivery{{{d("t1", b2, "b"), d("t2", b3, "b")}}, {{}}, {{d("t1", b2, "x"), d("t2", b3, "b")}}},
			wantCheck: `node C: task "t1" at (2, "B") has payload "x"`},
		{name: "backwards on one stream",
			streams:   [][][]delivery{{{d("t1", b2, "b"), d("t2", b3, "b")}}, {{}}, {{d("t1", b2, "b"), d("t1", a1, "a"), d("t2", b3, "b")}}},
			wantCheck: `node C: task "t1" delivered (1, "A")`,
			wantMono:  `node C stream #1: task "t1" went backwards`},
		{name: "restarted node: older delivery on the new stream, winner on the old one",
			streams: [][][]delivery{{{d("t1", b2, "b"), d("t2", b3, "b")}}, {{}}, {{d("t1", b2, "b"), d("t2", b3, "b")}, {d("t1", a1, "a")}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cv := fakeConvergence(tc.streams)
			if err := cv.check(l, []int{0, 1, 2}); !errorMatches(err, tc.wantCheck) {
				t.Errorf("check: %v, want %q", err, tc.wantCheck)
			}
			if err := cv.checkMonotonic(); !errorMatches(err, tc.wantMono) {
				t.Errorf("checkMonotonic: %v, want %q", err, tc.wantMono)
			}
		})
	}
}

// fakeConvergence builds a checker over nodes A, B, C whose streams recorded ds.
func fakeConvergence(ds [][][]delivery) *convergence {
	cv := &convergence{c: &cluster{}, streams: make([][]*recorder, len(ds))}
	for i, streams := range ds {
		cv.c.nodes = append(cv.c.nodes, &node{index: i, spec: nodeSpec{ID: string(rune('A' + i))}})
		for k, s := range streams {
			r := &recorder{name: fmt.Sprintf("node %c stream #%d", 'A'+i, k+1), latest: make(map[string]delivery), live: -1}
			for j, d := range s {
				d.Revision = uint64(j + 1)
				r.all = append(r.all, d)
				r.latest[d.TaskID] = d
			}
			cv.streams[i] = append(cv.streams[i], r)
		}
	}
	return cv
}

// acceptedAll is a SubmitResponse that accepted every event, with these versions.
func acceptedAll(versions ...uint64) *fanoutv1.SubmitResponse {
	resp := &fanoutv1.SubmitResponse{Versions: versions}
	for range versions {
		resp.Results = append(resp.Results, &fanoutv1.EventResult{Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED})
	}
	return resp
}

func errorMatches(err error, want string) bool {
	if want == "" {
		return err == nil
	}
	return err != nil && strings.Contains(err.Error(), want)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// backgroundLoad makes each origin (node index) update n keys of its own
// (prefix+id+"/"), batch per request, one request every 20ms in turn, each recorded
// in l, until the returned stop is called; stop fails the test on any error. The
// clients are taken here: the test goroutine may change the cluster meanwhile.
func backgroundLoad(t *testing.T, c *cluster, origins []int, prefix string, n, batch int, l *ledger) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	errs := make(chan error, len(origins))
	for _, origin := range origins {
		id, cli := c.node(origin).spec.ID, c.client(origin)
		go func() {
			for round := 0; ; round++ {
				select {
				case <-done:
					errs <- nil
					return
				case <-time.After(20 * time.Millisecond):
				}
				reqs := changes(prefix+id+"/", fmt.Sprint(round), n, batch)
				if err := submitAll(cli, id, reqs[round%len(reqs):round%len(reqs)+1], l); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	return func() {
		t.Helper()
		close(done)
		for range origins {
			if err := <-errs; err != nil {
				t.Fatalf("background load: %v", err)
			}
		}
	}
}
