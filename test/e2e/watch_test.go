package e2e

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// Tests of Subscribe as list+watch: snapshot, resume, prefixes, batches.

// TestSnapshot has A, B and C write 300 tasks, overlapping (so last-writer-wins
// decides some), and C delete 20 of A's, and waits until every node's Get agrees. Then
// a new Subscribe with snapshot on each node gets exactly the current (version,
// origin) and payload of every task, each once, no deleted one, then one
// snapshot_complete, then live changes: a write from another node, after the marker.
// An app that subscribes again (a restart of the app) gets a snapshot that holds those
// live writes too.
func TestSnapshot(t *testing.T) { snapshotScenario(t, startCluster(t, specs(3)...)) }

// snapshotScenario is TestSnapshot's scenario on c, three started nodes of either
// transport.
func snapshotScenario(t *testing.T, c *cluster) {
	t.Helper()
	l := newLedger()
	startPaced(t, c, map[int][][]*fanoutv1.Event{
		0: updates("snap/", 200, 2, 50),
		1: shift(updates("snap/", 200, 2, 50), 100),
		2: shift(updates("snap/", 50, 2, 50), 250),
	}, 0, l).wait(t)
	waitStates(t, c, "snap/", l)
	var deletes []*fanoutv1.Event
	for i := range 20 {
		deletes = append(deletes, &fanoutv1.Event{TaskId: fmt.Sprintf("snap/%04d", i), Deleted: true})
	}
	resp := submitResp(t, c, 2, &fanoutv1.SubmitRequest{Events: deletes}, l)
	for i, r := range resp.GetResults() {
		if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
			t.Fatalf("C's delete of %s: %v, want ACCEPTED (C's clock is past A's write)", deletes[i].GetTaskId(), r)
		}
	}
	waitStates(t, c, "snap/", l)

	for round := range 2 {
		for i := range c.nodes {
			waitStates(t, c, "snap/", l) // the previous node's live writes are everywhere
			winner, _ := l.snapshot()
			r := subscribeWith(t, c, i, subOpts{prefix: "snap/", snapshot: true})
			checkSnapshot(t, r.name, r.waitSnapshot(t, convergeTimeout), winner)
			// A live change from another node, of a task in the snapshot and of a new one.
			writer := (i + 1) % len(c.nodes)
			live := newLedger()
			ids := []string{"snap/0150", fmt.Sprintf("snap/live-%d-%d", round, i)}
			submit(t, c, writer, [][]*fanoutv1.Event{{{TaskId: ids[0], Payload: []byte("live")}, {TaskId: ids[1], Payload: []byte("live")}}}, both{l, live})
			want, _ := live.snapshot()
			waitLatest(t, convergeTimeout, want, r)
			for _, id := range ids {
				if !slices.ContainsFunc(r.livePart(), func(d delivery) bool { return d.TaskID == id && d.Stamp == want[id].Stamp }) {
					t.Errorf("%s: live write %s of %q did not come after snapshot_complete", r.name, want[id].Stamp, id)
				}
			}
			checkAllMonotonic(t, r)
		}
	}
	events, tasks := l.count()
	t.Logf("%d events over %d tasks; 6 snapshots, each exact", events, tasks)
}

// shift renumbers the tasks of reqs (prefix + "%04d") by adding by.
func shift(reqs [][]*fanoutv1.Event, by int) [][]*fanoutv1.Event {
	for _, events := range reqs {
		for _, ev := range events {
			id := ev.GetTaskId()
			var n int
			fmt.Sscanf(id[len(id)-4:], "%04d", &n)
			ev.TaskId = fmt.Sprintf("%s%04d", id[:len(id)-4], n+by)
		}
	}
	return reqs
}

// The load of TestResume: three origins write the same resumeTasks tasks over
// resumeRounds rounds, paced, and each origin deletes some of them in some rounds.
const (
	resumeTasks    = 150
	resumeRounds   = 8
	resumeBatch    = 25
	resumeInterval = 10 * time.Millisecond // 48 requests per origin: about 0.5 s
)

// resumeLoad is origin k's part of the load of TestResume: in rounds 3 and 6 it
// deletes every seventh task (offset by k), which later rounds may write again.
func resumeLoad(k int) [][]*fanoutv1.Event {
	reqs := updates("resume/", resumeTasks, resumeRounds, resumeBatch)
	for r, events := range reqs {
		round := r / (resumeTasks / resumeBatch)
		for i, ev := range events {
			task := (r%(resumeTasks/resumeBatch))*resumeBatch + i
			if (round == 3 || round == 6) && task%7 == k {
				events[i] = &fanoutv1.Event{TaskId: ev.GetTaskId(), Deleted: true}
			} else {
				ev.Payload = fmt.Appendf(ev.Payload, "/%d", k)
			}
		}
	}
	return reqs
}

// TestResume subscribes on B (snapshot, own writes included) while A, B and C write,
// update and delete the same tasks; cancels the stream a third into the load; and,
// while the load goes on, subscribes again from the last revision it received. The
// two streams together lose nothing and duplicate nothing: replaying them in order
// gives exactly the final state (the ledger's winners, and B's Get), deletions
// included; no (task, revision) comes twice; every revision of the second stream is
// above the resume point; revisions rise on each stream; and no task goes backwards
// across the two.
func TestResume(t *testing.T) { resumeScenario(t, startCluster(t, specs(3)...)) }

// resumeScenario is TestResume's scenario on c, three started nodes of either
// transport.
func resumeScenario(t *testing.T, c *cluster) {
	t.Helper()
	l := newLedger()
	first := subscribeWith(t, c, 1, subOpts{prefix: "resume/", snapshot: true, includeOwn: true})
	ld := startPaced(t, c, map[int][][]*fanoutv1.Event{0: resumeLoad(0), 1: resumeLoad(1), 2: resumeLoad(2)}, resumeInterval, l)
	eventually(t, convergeTimeout, "a third of the load submitted and received", func() error {
		if p, n := ld.progress(), first.count(); p < 1.0/3 || n == 0 {
			return fmt.Errorf("%.0f%% submitted, %d received", 100*p, n)
		}
		return nil
	})
	first.cancel()
	<-first.done
	eventually(t, stepTimeout, first.name+" closed", func() error {
		if n := subscribers(t, c.node(1)); n != 0 {
			return fmt.Errorf("node reports %d subscribers", n)
		}
		return nil
	})
	from := first.lastRevision()
	second := subscribeWith(t, c, 1, subOpts{prefix: "resume/", fromRevision: from, includeOwn: true})
	if ld.progress() == 1 {
		t.Logf("the load ended before the resume; the test still checks it, but not while writes go on")
	}
	ld.wait(t)
	waitStates(t, c, "resume/", l)

	winner, _ := l.snapshot()
	eventually(t, convergeTimeout, "the two streams replay to the final state", func() error {
		return checkReplay(winner, first.deliveries(), second.deliveries())
	})
	got, err := getPrefix(c.node(1), "resume/")
	if err != nil {
		t.Fatal(err)
	}
	if err := diffState("B", got, winner, false); err != nil {
		t.Error(err)
	}
	checkAllMonotonic(t, first, second)
	seen := make(map[string]bool)
	for _, d := range first.deliveries() {
		seen[fmt.Sprint(d.TaskID, "@", d.Revision)] = true
	}
	for _, d := range second.deliveries() {
		switch {
		case d.Revision <= from:
			t.Errorf("%s: task %q at revision %d, not after the resume point %d", second.name, d.TaskID, d.Revision, from)
		case seen[fmt.Sprint(d.TaskID, "@", d.Revision)]:
			t.Errorf("%s: task %q at revision %d was delivered on the first stream already", second.name, d.TaskID, d.Revision)
		}
	}
	prev := make(map[string]stamp)
	for i, d := range append(first.deliveries(), second.deliveries()...) {
		if p, ok := prev[d.TaskID]; ok && !d.Stamp.newerThan(p) {
			t.Errorf("task %q went backwards or repeated across the two streams at delivery #%d: %s after %s", d.TaskID, i, d.Stamp, p)
			break
		}
		prev[d.TaskID] = d.Stamp
	}
	events, tasks := l.count()
	t.Logf("%d events over %d tasks from 3 origins; the first stream got %d entries up to revision %d, the resumed one %d",
		events, tasks, first.count(), from, second.count())
}

// checkReplay applies the deliveries of streams in order and compares the result
// with want: a task whose winner is a deletion must end deleted or never have been
// seen; any other must end at its winner and payload.
func checkReplay(want map[string]expected, streams ...[]delivery) error {
	state := make(map[string]delivery)
	for _, ds := range streams {
		for _, d := range ds {
			state[d.TaskID] = d
		}
	}
	var problems []string
	for _, id := range slices.Sorted(maps.Keys(want)) {
		w := want[id]
		d, ok := state[id]
		switch {
		case w.Deleted && ok && (!d.Deleted || d.Stamp != w.Stamp):
			problems = append(problems, fmt.Sprintf("task %q ends at %s (deleted=%t), want deleted at %s", id, d.Stamp, d.Deleted, w.Stamp))
		case w.Deleted:
		case !ok:
			problems = append(problems, fmt.Sprintf("task %q never delivered, want %s", id, w.Stamp))
		case d.Stamp != w.Stamp || d.Deleted || !bytes.Equal(d.Payload, w.Payload):
			problems = append(problems, fmt.Sprintf("task %q ends at %s (deleted=%t, payload %q), want %s (payload %q)", id, d.Stamp, d.Deleted, d.Payload, w.Stamp, w.Payload))
		}
	}
	for id := range state {
		if _, ok := want[id]; !ok {
			problems = append(problems, fmt.Sprintf("task %q was never accepted", id))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d tasks differ; first: %s", len(problems), problems[0])
	}
	return nil
}

// TestNarrowPrefix subscribes on B with prefix "a/" while A writes tasks under "a/"
// and "b/", interleaved in every request: the narrow subscriber gets every "a/" task
// at its winner and nothing else, and a later subscriber for "b/" with snapshot gets
// every "b/" task at its winner (a prefix never drops anything for anyone else).
func TestNarrowPrefix(t *testing.T) { narrowPrefixScenario(t, startCluster(t, specs(2)...)) }

// narrowPrefixScenario is TestNarrowPrefix's scenario on c, two started nodes of
// either transport.
func narrowPrefixScenario(t *testing.T, c *cluster) {
	t.Helper()
	narrow := subscribe(t, c, 1, "a/")
	exp := newExpectations()
	var reqs [][]*fanoutv1.Event
	for r := range 3 {
		for batch := range 10 {
			var events []*fanoutv1.Event
			for i := batch * 20; i < (batch+1)*20; i++ {
				for _, p := range []string{"a/", "b/"} {
					id := fmt.Sprintf("%s%04d", p, i)
					events = append(events, &fanoutv1.Event{TaskId: id, Payload: fmt.Appendf(nil, "%s@%d", id, r)})
				}
			}
			reqs = append(reqs, events)
		}
	}
	submit(t, c, 0, reqs, exp)
	want := exp.snapshot()
	waitLatest(t, convergeTimeout, only(want, "a/"), narrow)
	for _, d := range narrow.deliveries() {
		if !strings.HasPrefix(d.TaskID, "a/") {
			t.Errorf("%s got task %q", narrow.name, d.TaskID)
			break
		}
	}
	eventually(t, convergeTimeout, "B holds every b/ task", func() error {
		got, err := getPrefix(c.node(1), "b/")
		if err != nil {
			return err
		}
		return diffState("B", got, only(want, "b/"), false)
	})
	later := subscribeWith(t, c, 1, subOpts{prefix: "b/", snapshot: true})
	checkSnapshot(t, later.name, later.waitSnapshot(t, convergeTimeout), only(want, "b/"))
	checkAllMonotonic(t, narrow, later)
	t.Logf("%d events over %d tasks; %s received %d, the later b/ snapshot %d", exp.count(), len(want), narrow.name, narrow.count(), later.count())
}

// The load of TestLargeEvents: 400 events of 50 KiB, 20 MB in all.
const (
	largeEvents  = 400
	largePayload = 50 << 10
	largeBatch   = 20 // events per Submit: 1 MB requests
	defaultCap   = 1 << 20
)

// TestLargeEvents sends 400 events of 50 KiB from A to subscribers on B that use the
// harness's connection, i.e. gRPC's default 4 MiB receive limit, with max_batch=256:
// a live subscriber and snapshot subscribers with the default max_batch_bytes, a
// 256 KiB cap and a cap smaller than one entry. Every event arrives, no stream fails
// (RESOURCE_EXHAUSTED or otherwise), and no response exceeds its cap (an entry over
// the cap comes alone).
func TestLargeEvents(t *testing.T) {
	c := startCluster(t, specs(2)...)
	live := subscribeWith(t, c, 1, subOpts{prefix: "big/", maxBatch: 256})
	exp := newExpectations()
	submit(t, c, 0, sized(updates("big/", largeEvents, 1, largeBatch), largePayload), exp)
	want := exp.snapshot()
	waitLatest(t, convergeTimeout, want, live)
	checkShape(t, live, defaultCap, 0)

	cases := []struct {
		name       string
		cap        uint32 // max_batch_bytes; 0 is the default
		limit      int    // the largest response allowed
		maxEntries int    // the most entries one response may hold; 0: any
	}{
		{name: "default max_batch_bytes", limit: defaultCap},
		{name: "max_batch_bytes 256 KiB", cap: 256 << 10, limit: 256 << 10},
		// An entry over the cap comes alone: its payload and a little framing (task
		// id, version, origin, revision, timestamp: well under 1 KiB).
		{name: "max_batch_bytes under one entry", cap: 10 << 10, limit: largePayload + 1<<10, maxEntries: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := subscribeWith(t, c, 1, subOpts{prefix: "big/", snapshot: true, maxBatch: 256, maxBatchBytes: tc.cap})
			checkSnapshot(t, r.name, r.waitSnapshot(t, convergeTimeout), want)
			checkShape(t, r, tc.limit, tc.maxEntries)
			if _, _, most := r.shape(); tc.maxEntries == 0 && most < 2 {
				t.Errorf("%s: at most %d entry per response; want batches of several (the test must exercise the cap)", r.name, most)
			}
			checkAllMonotonic(t, r)
		})
	}
}

// checkShape fails the test if r's stream ended, a response was over limit bytes, or
// (if maxEntries > 0) held more than maxEntries entries.
func checkShape(t *testing.T, r *recorder, limit, maxEntries int) {
	t.Helper()
	msgs, biggest, most := r.shape()
	t.Logf("%s: %d entries in %d responses, the largest %d bytes, at most %d entries", r.name, r.count(), msgs, biggest, most)
	if err := r.streamErr(); err != nil {
		t.Errorf("%s ended: %v", r.name, err)
	}
	if biggest > limit {
		t.Errorf("%s: a response of %d bytes, over the cap of %d", r.name, biggest, limit)
	}
	if maxEntries > 0 && most > maxEntries {
		t.Errorf("%s: a response with %d entries, want at most %d", r.name, most, maxEntries)
	}
}
