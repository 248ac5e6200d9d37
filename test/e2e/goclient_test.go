package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fanout/fanout/pkg/client"
)

// TestGoClientWatchRestart: a pkg/client Watch on node A while B and C write without
// a pause; A is killed with SIGKILL and started again (memory only: a new table and
// new revisions, filled by its bootstrap). The Watch's resume is refused with
// OUT_OF_RANGE and it takes a new snapshot, delivering only what differs. The
// convergence checker then holds for what the Watch delivered, as if it were one
// stream: A's app has the winner of every task, A's table holds them, and no task
// was delivered twice or went backwards, with rising revisions.
func TestGoClientWatchRestart(t *testing.T) {
	c := startCluster(t, specs(3)...)
	const prefix = "goclient/"
	l := newLedger()
	stop := backgroundLoad(t, c, []int{1, 2}, prefix, 200, 50, l)

	cl, err := client.New(context.Background(), c.node(0).appAddr, client.WithMaxBackoff(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w := cl.Watch(context.Background(), prefix)
	r := watchRecorder(t, w, "Go client Watch on A")

	eventually(t, stepTimeout, "the Watch synced", func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.markers == 0 {
			return fmt.Errorf("not synced")
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	t.Log("A killed while B and C write")
	c.node(0).kill()
	time.Sleep(time.Second)
	c.node(0).restart()
	time.Sleep(500 * time.Millisecond)
	stop()

	cv := &convergence{t: t, c: c, streams: [][]*recorder{{r}, nil, nil}}
	cv.wait(convergeTimeout, l, 0)
	st := w.Stats()
	events, tasks := l.count()
	t.Logf("%d events of %d tasks; the Watch delivered %d (%+v)", events, tasks, r.count(), st)
	if st.OutOfRange == 0 || st.Snapshots < 2 {
		t.Errorf("watch stats %+v: want its resume refused (OUT_OF_RANGE) and a new snapshot", st)
	}
}

// watchRecorder feeds what w delivers into a recorder, as one stream with a snapshot
// (EventSynced is its snapshot_complete), for the convergence checker. The test's
// cleanup closes w and waits for the goroutine.
func watchRecorder(t *testing.T, w *client.Watch, name string) *recorder {
	r := &recorder{name: name, opts: subOpts{snapshot: true}, latest: make(map[string]delivery), live: -1, done: make(chan struct{})}
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
			if ev.Type == client.EventSynced {
				r.add(nil, true, 0, "")
				continue
			}
			e := ev.Entry
			d := delivery{TaskID: e.Key, Stamp: stamp{Version: e.Version, Origin: e.Origin}, Payload: e.Value,
				Deleted: e.Deleted, Revision: e.Revision, At: time.Now(), Submitted: e.SubmittedAt}
			r.add([]delivery{d}, false, 0, "")
		}
	}()
	t.Cleanup(func() {
		w.Close()
		<-r.done
	})
	return r
}
