package e2e

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// stamp is a version with the node that wrote it. Stamps order by (version, origin),
// the last-writer-wins rule of SPEC §6.
type stamp struct {
	Version uint64
	Origin  string
}

func (s stamp) newerThan(o stamp) bool {
	return s.Version > o.Version || (s.Version == o.Version && s.Origin > o.Origin)
}

func (s stamp) String() string { return fmt.Sprintf("(%d, %q)", s.Version, s.Origin) }

// delivery is one event as a subscriber received it.
type delivery struct {
	TaskID  string
	Stamp   stamp
	Payload []byte
	At      time.Time // when Recv returned it
	// Submitted is when the origin accepted the event (SubscribeResponse.submitted_at);
	// zero if the node did not say.
	Submitted time.Time
}

// recorder is one open Subscribe stream on a node. A goroutine it owns receives every
// delivery in order; the test goroutine reads what it recorded. t.Cleanup ends the
// stream and waits for the goroutine.
type recorder struct {
	name string

	mu     sync.Mutex
	all    []delivery          // guarded by mu; in arrival order
	latest map[string]delivery // guarded by mu; the last delivery per task_id
	err    error               // guarded by mu; why the stream ended, once it has

	cancel context.CancelFunc
	done   chan struct{} // closed when the receiving goroutine has returned
}

// subscribe opens Subscribe(prefix) on node n of c and waits until the node counts
// one more subscriber, so nothing submitted afterwards can miss it.
func subscribe(t *testing.T, c *cluster, n int, prefix string) *recorder {
	t.Helper()
	before := subscribers(t, c.node(n))
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := c.client(n).Subscribe(ctx, &fanoutv1.SubscribeRequest{TaskIdPrefix: prefix})
	if err != nil {
		cancel()
		t.Fatalf("Subscribe on node %d: %v", n, err)
	}
	r := &recorder{
		name:   fmt.Sprintf("subscriber on %s (prefix %q)", c.node(n).spec.ID, prefix),
		latest: make(map[string]delivery),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go r.receive(stream)
	var registered uint64
	t.Cleanup(func() { r.close(t, c.node(n), registered) })
	eventually(t, 5*time.Second, r.name+" registered", func() error {
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
	eventually(t, 5*time.Second, r.name+" unregistered", func() error {
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
		ev := resp.GetEvent()
		d := delivery{
			TaskID:  ev.GetTaskId(),
			Stamp:   stamp{Version: ev.GetVersion(), Origin: resp.GetOriginNode()},
			Payload: ev.GetPayload(),
			At:      time.Now(),
		}
		if ts := resp.GetSubmittedAt(); ts != nil {
			d.Submitted = ts.AsTime()
		}
		r.mu.Lock()
		r.all = append(r.all, d)
		r.latest[d.TaskID] = d
		r.mu.Unlock()
	}
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

// checkMonotonic returns an error naming the first delivery whose stamp is not newer
// than the previous delivery of the same task_id at this subscriber (SPEC §6: versions
// never go backwards, and a duplicate is never delivered).
func (r *recorder) checkMonotonic() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := make(map[string]stamp, len(r.latest))
	for i, d := range r.all {
		if p, ok := prev[d.TaskID]; ok && !d.Stamp.newerThan(p) {
			what := "went backwards"
			if d.Stamp == p {
				what = "was delivered twice"
			}
			return fmt.Errorf("%s: task %q %s: delivery #%d has %s after %s", r.name, d.TaskID, what, i, d.Stamp, p)
		}
		prev[d.TaskID] = d.Stamp
	}
	return nil
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
		if ok && got.Stamp == w.Stamp && (w.Payload == nil || bytes.Equal(got.Payload, w.Payload)) {
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
