package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout/pkg/client"
	"google.golang.org/grpc"
)

// recorder consumes a Watch and checks what it delivers: per key, every event's
// version above the one before (no duplicate, never backwards), except an inferred
// Delete, which keeps the version of the Put it follows; and keeps the map the events
// build.
type recorder struct {
	t      *testing.T
	mu     sync.Mutex
	state  map[string]client.Entry
	last   map[string]client.WatchEvent
	count  int
	synced bool
	bad    []string
	err    error
	done   chan struct{}
	change chan struct{}
}

func record(t *testing.T, w *client.Watch) *recorder {
	r := &recorder{t: t, state: make(map[string]client.Entry), last: make(map[string]client.WatchEvent),
		done: make(chan struct{}), change: make(chan struct{}, 1)}
	go func() {
		defer close(r.done)
		for {
			ev, err := w.Next()
			if err != nil {
				r.mu.Lock()
				r.err = err
				r.mu.Unlock()
				return
			}
			r.take(ev)
		}
	}()
	t.Cleanup(func() {
		w.Close()
		<-r.done
	})
	return r
}

func (r *recorder) take(ev client.WatchEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		select {
		case r.change <- struct{}{}:
		default:
		}
	}()
	if ev.Type == client.EventSynced {
		if r.synced {
			r.bad = append(r.bad, "a second SYNCED")
		}
		r.synced = true
		return
	}
	r.count++
	key := ev.Entry.Key
	prev, ok := r.last[key]
	switch {
	case ev.Type == client.EventDelete && !ok:
		r.bad = append(r.bad, fmt.Sprintf("%s: DELETE of a key never delivered", key))
	case ok && prev.Type == client.EventDelete && ev.Type == client.EventDelete:
		r.bad = append(r.bad, fmt.Sprintf("%s: DELETE after DELETE (version %d after %d)", key, ev.Entry.Version, prev.Entry.Version))
	case ev.Inferred && (ev.Entry.Version != prev.Entry.Version || prev.Type != client.EventPut):
		r.bad = append(r.bad, fmt.Sprintf("%s: inferred DELETE at version %d after %s at %d", key, ev.Entry.Version, prev.Type, prev.Entry.Version))
	case !ev.Inferred && ok && ev.Entry.Version <= prev.Entry.Version:
		r.bad = append(r.bad, fmt.Sprintf("%s: %s at version %d after %s at %d: a duplicate or going backwards", key, ev.Type, ev.Entry.Version, prev.Type, prev.Entry.Version))
	}
	r.last[key] = ev
	if ev.Type == client.EventDelete {
		delete(r.state, key)
	} else {
		r.state[key] = ev.Entry
	}
}

func (r *recorder) events() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// check fails the test for every bad sequence seen.
func (r *recorder) check() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bad {
		r.t.Error(b)
	}
	if r.err != nil {
		r.t.Errorf("the watch ended: %v", r.err)
	}
}

// waitEqual waits until the recorder's map equals want's keys at their versions and
// values, or fails after d.
func (r *recorder) waitEqual(want func() map[string]client.Entry, d time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	var diff string
	for time.Now().Before(deadline) {
		w := want()
		r.mu.Lock()
		diff = mapDiff(r.state, w)
		r.mu.Unlock()
		if diff == "" {
			return
		}
		select {
		case <-r.change:
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.t.Fatalf("the watch's map differs from the sidecar's after %s: %s", d, diff)
}

func mapDiff(got, want map[string]client.Entry) string {
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			return fmt.Sprintf("%s missing (want version %d)", k, w.Version)
		}
		if g.Version != w.Version || g.Origin != w.Origin || string(g.Value) != string(w.Value) {
			return fmt.Sprintf("%s at version %d from %s %q, want %d from %s %q", k, g.Version, g.Origin, g.Value, w.Version, w.Origin, w.Value)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			return fmt.Sprintf("%s at version %d, deleted on the sidecar", k, g.Version)
		}
	}
	return ""
}

// writer writes to c until stopped: puts over keys keys of prefix, and every 5th
// write a delete. It returns the stop func, which waits for it and returns how many
// writes succeeded (writes to a node that is down fail and are not counted).
func writer(t *testing.T, c *client.Client, prefix string, keys int) func() int {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		n := 0
		for i := 0; ctx.Err() == nil; i++ {
			key := fmt.Sprintf("%sk%02d", prefix, (i*7)%keys)
			var err error
			if i%5 == 4 {
				_, err = c.Delete(ctx, key)
			} else {
				_, err = c.Put(ctx, key, []byte(fmt.Sprint("v", i)))
			}
			if err == nil {
				n++
			}
			time.Sleep(2 * time.Millisecond)
		}
		done <- n
	}()
	return func() int {
		cancel()
		return <-done
	}
}

func listAll(t *testing.T, c *client.Client, prefix string) func() map[string]client.Entry {
	return func() map[string]client.Entry {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := c.ListAll(ctx, prefix)
		if err != nil {
			t.Logf("list %s: %v", prefix, err)
			return nil
		}
		return m
	}
}

// TestWatchAcrossRestart: a Watch on node A while B takes writes and deletes without
// a pause; A is killed with SIGKILL and started again (without --data-dir: a new
// table, new revisions, filled by its bootstrap from B). The Watch's resume is refused
// with OUT_OF_RANGE, it takes a new snapshot, and what it delivered has no duplicate,
// no state older than one delivered, and ends equal to the table of both nodes.
func TestWatchAcrossRestart(t *testing.T) {
	nodes := startNodes(t, 2)
	a, b := nodes[0], nodes[1]
	ca := dial(t, a.app, client.WithMaxBackoff(200*time.Millisecond))
	cb := dial(t, b.app)
	ctx := within(t, 2*time.Minute)
	const prefix = "restart/"
	for i := range 20 {
		if _, err := cb.Put(ctx, fmt.Sprintf("%sk%02d", prefix, i), []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	var retries int
	var rmu sync.Mutex
	w := ca.Watch(ctx, prefix, client.WithOnRetry(func(error) { rmu.Lock(); retries++; rmu.Unlock() }))
	rec := record(t, w)
	rec.waitEqual(listAll(t, cb, prefix), 30*time.Second)

	// Keys the writer does not touch: one deleted and one updated while A is down.
	for _, k := range []string{"solo-deleted", "solo-updated"} {
		if _, err := cb.Put(ctx, prefix+k, []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	stop := writer(t, cb, prefix, 30)
	time.Sleep(300 * time.Millisecond)
	rec.waitEqual(func() map[string]client.Entry { // A's watch has the solo keys
		m := listAll(t, cb, prefix)()
		for k := range m {
			if k != prefix+"solo-deleted" && k != prefix+"solo-updated" {
				delete(m, k)
			}
		}
		rec.mu.Lock()
		for k, e := range rec.state {
			if _, ok := m[k]; !ok && k != prefix+"solo-deleted" && k != prefix+"solo-updated" {
				m[k] = e
			}
		}
		rec.mu.Unlock()
		return m
	}, 30*time.Second)
	a.kill()
	if _, err := cb.Delete(ctx, prefix+"solo-deleted"); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Put(ctx, prefix+"solo-updated", []byte("after")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // writes and deletes A's watch cannot see
	a.restart()
	time.Sleep(300 * time.Millisecond)
	n := stop()
	rmu.Lock()
	t.Logf("%d writes to B, %d retries so far, %+v", n, retries, w.Stats())
	rmu.Unlock()

	// B's writes reach A (replication, anti-entropy); then the watch holds the same.
	rec.waitEqual(func() map[string]client.Entry {
		ma, mb := listAll(t, ca, prefix)(), listAll(t, cb, prefix)()
		if d := mapDiff(ma, mb); d != "" {
			return map[string]client.Entry{"(A and B differ)": {}}
		}
		return ma
	}, 60*time.Second)
	rec.check()
	t.Logf("%d events delivered, %+v", rec.events(), w.Stats())
	rec.mu.Lock()
	if d := rec.last[prefix+"solo-deleted"]; d.Type != client.EventDelete || !d.Inferred {
		t.Errorf("the key deleted while A was down: last event %+v, want an inferred DELETE", d)
	}
	if u := rec.last[prefix+"solo-updated"]; u.Type != client.EventPut || string(u.Entry.Value) != "after" {
		t.Errorf("the key updated while A was down: last event %+v, want its new value", u)
	}
	rec.mu.Unlock()
	if st := w.Stats(); st.OutOfRange == 0 || st.Snapshots < 2 {
		t.Errorf("stats %+v: want the resume refused (OUT_OF_RANGE) and a new snapshot", st)
	}
}

// cutter is a dialer whose connections can be cut, to break streams without
// restarting the sidecar.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// TestWatchResumes: streams broken (the connection cut) while writes and deletes go
// on resume from the last revision on the same node: no new snapshot, no duplicate,
// no gap.
func TestWatchResumes(t *testing.T) {
	n := startNodes(t, 1)[0]
	var cut cutter
	cw := dial(t, n.app, client.WithDialOptions(grpc.WithContextDialer(cut.dial)), client.WithMaxBackoff(100*time.Millisecond))
	c := dial(t, n.app)
	ctx := within(t, time.Minute)
	const prefix = "resume/"
	w := cw.Watch(ctx, prefix)
	rec := record(t, w)
	if _, err := c.Put(ctx, prefix+"first", []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec.waitEqual(listAll(t, c, prefix), 30*time.Second)
	stop := writer(t, c, prefix, 20)
	for range 5 {
		time.Sleep(100 * time.Millisecond)
		cut.cut()
	}
	time.Sleep(100 * time.Millisecond)
	writes := stop()
	rec.waitEqual(listAll(t, c, prefix), 30*time.Second)
	rec.check()
	st := w.Stats()
	t.Logf("%d writes, %d events, %+v", writes, rec.events(), st)
	if st.Streams < 3 || st.Snapshots != 1 || st.OutOfRange != 0 {
		t.Errorf("stats %+v: want several streams, resumed from their revision (one snapshot, no OUT_OF_RANGE)", st)
	}

	w.Close()
	<-rec.done
	if !errors.Is(rec.err, client.ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", rec.err)
	}
}
