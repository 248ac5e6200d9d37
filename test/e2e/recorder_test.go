package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// stamp is a version with the node that wrote it. Stamps order by (version, origin),
// the last-writer-wins rule (the highest (version, origin) wins a key).
type stamp struct {
	Version uint64
	Origin  string
}

func (s stamp) newerThan(o stamp) bool {
	return s.Version > o.Version || (s.Version == o.Version && s.Origin > o.Origin)
}

func (s stamp) String() string { return fmt.Sprintf("(%d, %q)", s.Version, s.Origin) }

// delivery is one entry as a subscriber received it.
type delivery struct {
	TaskID   string
	Stamp    stamp
	Payload  []byte
	Deleted  bool      // a tombstone (Event.deleted)
	Revision uint64    // the node's revision of the change
	At       time.Time // when Recv returned it
	// Submitted is when the origin accepted the event (SubscribeResponse.submitted_at);
	// zero if the node did not say.
	Submitted time.Time
}

// subOpts are the options of a SubscribeRequest.
type subOpts struct {
	prefix        string
	snapshot      bool   // list, then snapshot_complete, then watch
	fromRevision  uint64 // resume after this revision
	includeOwn    bool   // the node's own writes in the live part
	maxBatch      uint32 // entries per response; 0 or 1: one
	maxBatchBytes uint32 // bytes per response; 0: the node's default (1 MiB)
	allowUnsynced bool   // a snapshot at once, even while the node bootstraps
}

func (o subOpts) request() *fanoutv1.SubscribeRequest {
	return &fanoutv1.SubscribeRequest{
		TaskIdPrefix: o.prefix, Snapshot: o.snapshot, FromRevision: o.fromRevision,
		IncludeOwn: o.includeOwn, MaxBatch: o.maxBatch, MaxBatchBytes: o.maxBatchBytes,
		AllowUnsynced: o.allowUnsynced,
	}
}

func (o subOpts) String() string {
	s := fmt.Sprintf("prefix %q", o.prefix)
	if o.snapshot {
		s += ", snapshot"
	}
	if o.fromRevision > 0 {
		s += fmt.Sprintf(", from revision %d", o.fromRevision)
	}
	if o.includeOwn {
		s += ", own writes"
	}
	if o.maxBatch > 1 {
		s += fmt.Sprintf(", batches of %d", o.maxBatch)
	}
	if o.maxBatchBytes > 0 {
		s += fmt.Sprintf(", at most %d bytes", o.maxBatchBytes)
	}
	if o.allowUnsynced {
		s += ", unsynced"
	}
	return s
}

// recorder is one open Subscribe stream on a node. A goroutine it owns receives every
// delivery in order; the test goroutine reads what it recorded. t.Cleanup ends the
// stream and waits for the goroutine.
type recorder struct {
	name string
	opts subOpts

	mu     sync.Mutex
	all    []delivery          // guarded by mu; in arrival order
	latest map[string]delivery // guarded by mu; the last delivery per task_id
	err    error               // guarded by mu; why the stream ended, once it has
	// live is the index in all of the first delivery after snapshot_complete; -1
	// until that marker arrives. Guarded by mu.
	live    int
	markers int // guarded by mu; snapshot_complete responses received
	// msgs, maxMsgBytes and maxEntries describe the responses: how many, the largest
	// encoded size, the most entries in one. Guarded by mu.
	msgs, maxMsgBytes, maxEntries int
	// violations are responses that break the shape of SubscribeResponse (an entry
	// and a batch at once, a marker with an entry, an empty response). Guarded by mu.
	violations []string

	cancel context.CancelFunc
	done   chan struct{} // closed when the receiving goroutine has returned
}

// subscribe opens Subscribe(prefix), live changes only, on node n of c and waits
// until the node counts one more subscriber, so nothing submitted afterwards can miss
// it.
func subscribe(t *testing.T, c *cluster, n int, prefix string) *recorder {
	t.Helper()
	return subscribeWith(t, c, n, subOpts{prefix: prefix})
}

// subscribeWith is subscribe with every option of the request.
func subscribeWith(t *testing.T, c *cluster, n int, o subOpts) *recorder {
	t.Helper()
	before := subscribers(t, c.node(n))
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.client(n).Subscribe(ctx, o.request())
	if err != nil {
		cancel()
		t.Fatalf("Subscribe on node %d: %v", n, err)
	}
	r := &recorder{
		name:   fmt.Sprintf("subscriber on %s (%s)", c.node(n).spec.ID, o),
		opts:   o,
		latest: make(map[string]delivery),
		live:   -1,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go r.receive(stream)
	var registered uint64
	t.Cleanup(func() { r.close(t, c.node(n), registered) })
	eventually(t, stepTimeout, r.name+" registered", func() error {
		if registered = subscribers(t, c.node(n)); registered <= before {
			return fmt.Errorf("node reports %d subscribers", registered)
		}
		return nil
	})
	return r
}

// close ends the stream and waits until the node has unregistered it (its subscriber
// count drops below registered), so that the next subscribe on the node counts from
// a settled number. A node that is gone is not asked.
func (r *recorder) close(t *testing.T, n *node, registered uint64) {
	r.cancel()
	<-r.done
	if !n.running() || registered == 0 {
		return
	}
	eventually(t, stepTimeout, r.name+" unregistered", func() error {
		st, err := n.status()
		if err != nil || st.GetSubscribers() < registered {
			return nil // a node that does not answer has no subscribers to settle
		}
		return fmt.Errorf("node still reports %d subscribers", st.GetSubscribers())
	})
}

func subscribers(t *testing.T, n *node) uint64 {
	t.Helper()
	st, err := n.status()
	if err != nil {
		t.Fatalf("GetStatus on node %d: %v", n.index, err)
	}
	return st.GetSubscribers()
}

func (r *recorder) receive(stream fanoutv1.FanoutService_SubscribeClient) {
	defer close(r.done)
	for {
		resp, err := stream.Recv()
		if err != nil {
			r.mu.Lock()
			r.err = err
			r.mu.Unlock()
			return
		}
		r.record(resp, time.Now())
	}
}

// record adds the entries of one response, received at, to what r recorded.
func (r *recorder) record(resp *fanoutv1.SubscribeResponse, at time.Time) {
	var ds []delivery
	var violation string
	single := resp.GetEvent() != nil
	switch {
	case resp.GetSnapshotComplete() && (single || len(resp.GetBatch()) > 0):
		violation = "snapshot_complete with an entry"
	case single && len(resp.GetBatch()) > 0:
		violation = "both an event and a batch"
	case !resp.GetSnapshotComplete() && !single && len(resp.GetBatch()) == 0:
		violation = "an empty response"
	case single:
		ds = append(ds, newDelivery(resp.GetEvent(), resp.GetOriginNode(), resp.GetSubmittedAt(), resp.GetRevision(), at))
	}
	for _, e := range resp.GetBatch() {
		if e.GetEvent() == nil {
			violation = "a batch entry without an event"
			continue
		}
		ds = append(ds, newDelivery(e.GetEvent(), e.GetOriginNode(), e.GetSubmittedAt(), e.GetRevision(), at))
	}
	r.add(ds, resp.GetSnapshotComplete(), proto.Size(resp), violation)
}

// add records one response: its deliveries, whether it was snapshot_complete, its
// encoded size, and what was wrong with its shape ("" if nothing).
func (r *recorder) add(ds []delivery, marker bool, size int, violation string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs++
	r.maxMsgBytes = max(r.maxMsgBytes, size)
	r.maxEntries = max(r.maxEntries, len(ds))
	if violation != "" {
		r.violations = append(r.violations, fmt.Sprintf("response #%d: %s", r.msgs, violation))
	}
	if marker {
		if r.markers++; r.markers == 1 {
			r.live = len(r.all)
		}
	}
	for _, d := range ds {
		r.all = append(r.all, d)
		r.latest[d.TaskID] = d
	}
}

func newDelivery(ev *fanoutv1.Event, origin string, submitted *timestamppb.Timestamp, revision uint64, at time.Time) delivery {
	d := delivery{
		TaskID:   ev.GetTaskId(),
		Stamp:    stamp{Version: ev.GetVersion(), Origin: origin},
		Payload:  ev.GetPayload(),
		Deleted:  ev.GetDeleted(),
		Revision: revision,
		At:       at,
	}
	if submitted != nil {
		d.Submitted = submitted.AsTime()
	}
	return d
}

// deliveries returns a copy of everything received so far, in order.
func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.all)
}

// count returns the number of deliveries so far.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// checkMonotonic returns an error naming the first delivery that breaks what one
// stream promises:
//   - a task's stamp is newer than its previous delivery on the stream: versions never
//     go backwards, and nothing is delivered twice;
//   - every entry carries a revision; the live part (all of a stream without a
//     snapshot, or what follows snapshot_complete) has strictly rising revisions,
//     each above every snapshot entry's, so that resuming from the last revision seen
//     can neither skip nor repeat a change;
//   - a snapshot holds each task once and no tombstone, and ends with one
//     snapshot_complete; a stream without a snapshot has no such marker;
//   - every response has one shape: one entry, a batch, or the bare marker.
func (r *recorder) checkMonotonic() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) > 0 {
		return fmt.Errorf("%s: %d malformed responses; first: %s", r.name, len(r.violations), r.violations[0])
	}
	switch {
	case !r.opts.snapshot && r.markers > 0:
		return fmt.Errorf("%s: snapshot_complete on a stream without snapshot", r.name)
	case r.markers > 1:
		return fmt.Errorf("%s: %d snapshot_complete markers, want one", r.name, r.markers)
	}
	prev := make(map[string]stamp, len(r.latest))
	var snapMax, last uint64
	for i, d := range r.all {
		if p, ok := prev[d.TaskID]; ok && !d.Stamp.newerThan(p) {
			what := "went backwards"
			if d.Stamp == p {
				what = "was delivered twice"
			}
			return fmt.Errorf("%s: task %q %s: delivery #%d has %s after %s", r.name, d.TaskID, what, i, d.Stamp, p)
		}
		inSnapshot := r.opts.snapshot && (r.live < 0 || i < r.live)
		switch {
		case d.Revision == 0:
			return fmt.Errorf("%s: delivery #%d (task %q) has no revision", r.name, i, d.TaskID)
		case inSnapshot && d.Deleted:
			return fmt.Errorf("%s: the snapshot holds tombstone %q at %s", r.name, d.TaskID, d.Stamp)
		case inSnapshot:
			snapMax = max(snapMax, d.Revision)
		case d.Revision <= max(last, snapMax):
			return fmt.Errorf("%s: delivery #%d (task %q) has revision %d after revision %d (snapshot up to %d): revisions must rise",
				r.name, i, d.TaskID, d.Revision, last, snapMax)
		default:
			last = d.Revision
		}
		prev[d.TaskID] = d.Stamp
	}
	return nil
}

// lastRevision is the revision of the last delivery, the point to resume from; 0 if
// nothing was delivered.
func (r *recorder) lastRevision() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rev uint64
	for _, d := range r.all {
		rev = max(rev, d.Revision)
	}
	return rev
}

// snapshotPart returns the deliveries before snapshot_complete and whether the
// marker has arrived.
func (r *recorder) snapshotPart() ([]delivery, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.live < 0 {
		return slices.Clone(r.all), false
	}
	return slices.Clone(r.all[:r.live]), true
}

// livePart returns the deliveries after snapshot_complete (all of them on a stream
// without snapshot).
func (r *recorder) livePart() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.opts.snapshot {
		return slices.Clone(r.all)
	}
	if r.live < 0 {
		return nil
	}
	return slices.Clone(r.all[r.live:])
}

// waitSnapshot waits until the stream has received snapshot_complete and returns the
// snapshot.
func (r *recorder) waitSnapshot(t *testing.T, timeout time.Duration) []delivery {
	t.Helper()
	var snap []delivery
	eventually(t, timeout, r.name+" snapshot complete", func() error {
		var done bool
		if snap, done = r.snapshotPart(); !done {
			return fmt.Errorf("%d entries so far, no snapshot_complete (stream: %v)", len(snap), r.streamErr())
		}
		return nil
	})
	return snap
}

// streamErr is why the stream ended, or nil while it is open.
func (r *recorder) streamErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// shape returns how many responses arrived, the largest encoded size of one and the
// most entries in one.
func (r *recorder) shape() (msgs, maxBytes, maxEntries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msgs, r.maxMsgBytes, r.maxEntries
}

// checkLatest compares the last delivery of each task_id with want. It returns an
// error naming the first task (in sorted order) that is missing, behind or different,
// and the number of tasks in that state; nil once every task is at its expected
// stamp and payload. Tasks not in want are ignored. It is called in polling loops,
// so it holds the lock only for map lookups: the receiving goroutine must not starve.
func (r *recorder) checkLatest(want map[string]expected) error {
	var first string
	bad := 0
	r.mu.Lock()
	for id, w := range want {
		got, ok := r.latest[id]
		if ok && got.Stamp == w.Stamp && got.Deleted == w.Deleted && (w.Payload == nil || bytes.Equal(got.Payload, w.Payload)) {
			continue
		}
		if bad == 0 || id < first {
			first = id
		}
		bad++
	}
	if bad == 0 {
		r.mu.Unlock()
		return nil
	}
	got, ok := r.latest[first]
	r.mu.Unlock()
	w := want[first]
	var problem string
	switch {
	case !ok:
		problem = fmt.Sprintf("task %q never arrived (want %s)", first, w.Stamp)
	case got.Stamp != w.Stamp:
		problem = fmt.Sprintf("task %q is at %s, want %s", first, got.Stamp, w.Stamp)
	case got.Deleted != w.Deleted:
		problem = fmt.Sprintf("task %q at %s has deleted=%t, want %t", first, got.Stamp, got.Deleted, w.Deleted)
	default:
		problem = fmt.Sprintf("task %q at %s has payload %q, want %q", first, got.Stamp, got.Payload, w.Payload)
	}
	return fmt.Errorf("%s: %d of %d tasks not at their latest version; first: %s", r.name, bad, len(want), problem)
}

// completedAt is the arrival time of the latest of the deliveries that want expects,
// i.e. when the subscriber first had every task at its expected version. Call it
// after checkLatest returned nil.
func (r *recorder) completedAt(want map[string]expected) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for id := range want {
		if at := r.latest[id].At; at.After(last) {
			last = at
		}
	}
	return last
}

// waitLatest waits until every recorder has every task of want at its expected
// version, and fails the test naming the first lagging task otherwise. It returns
// the time at which the last of them completed.
func waitLatest(t *testing.T, timeout time.Duration, want map[string]expected, rs ...*recorder) time.Time {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d tasks at their latest version on %d subscribers", len(want), len(rs)), func() error {
		for _, r := range rs {
			if err := r.checkLatest(want); err != nil {
				return err
			}
		}
		return nil
	})
	var last time.Time
	for _, r := range rs {
		if at := r.completedAt(want); at.After(last) {
			last = at
		}
	}
	return last
}

// checkAllMonotonic fails the test if any recorder saw a version go backwards.
func checkAllMonotonic(t *testing.T, rs ...*recorder) {
	t.Helper()
	for _, r := range rs {
		if err := r.checkMonotonic(); err != nil {
			t.Error(err)
		}
	}
}

// checkSnapshot fails the test unless snap, the snapshot part of a stream, holds
// every task of want that is not deleted, each once, at its winner, and nothing else.
func checkSnapshot(t *testing.T, name string, snap []delivery, want map[string]expected) {
	t.Helper()
	seen := make(map[string]delivery, len(snap))
	var problems []string
	for _, d := range snap {
		if _, dup := seen[d.TaskID]; dup {
			problems = append(problems, fmt.Sprintf("task %q twice", d.TaskID))
		}
		seen[d.TaskID] = d
		w, ok := want[d.TaskID]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("task %q (at %s) was never accepted under this prefix", d.TaskID, d.Stamp))
		case w.Deleted:
			problems = append(problems, fmt.Sprintf("task %q at %s, want it omitted (deleted at %s)", d.TaskID, d.Stamp, w.Stamp))
		case d.Stamp != w.Stamp || d.Deleted:
			problems = append(problems, fmt.Sprintf("task %q at %s (deleted=%t), want %s", d.TaskID, d.Stamp, d.Deleted, w.Stamp))
		case w.Payload != nil && !bytes.Equal(d.Payload, w.Payload):
			problems = append(problems, fmt.Sprintf("task %q at %s has payload %.40q, want %.40q", d.TaskID, d.Stamp, d.Payload, w.Payload))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(want)) {
		if _, ok := seen[id]; !ok && !want[id].Deleted {
			problems = append(problems, fmt.Sprintf("task %q missing (want %s)", id, want[id].Stamp))
		}
	}
	if len(problems) > 0 {
		t.Errorf("%s: the snapshot of %d entries is wrong in %d places; first: %s", name, len(snap), len(problems), problems[0])
	}
}
