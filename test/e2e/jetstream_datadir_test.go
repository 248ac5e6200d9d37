package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// TestJetStreamDataDirRestart: a sidecar on the JetStream transport with --data-dir,
// killed with kill -9 while the others write, comes back on its data dir and resumes
// the stream after the sequence it saved (reading only what changed, not the whole
// snapshot); then events it acknowledged with ack QUEUED while no NATS server was up
// (so only in its outbox and its data dir) survive a second kill -9 and reach every
// other sidecar after the restart. The convergence checker runs after each fault.
func TestJetStreamDataDirRestart(t *testing.T) {
	nc := startNATS(t, 3)
	c := jetStreamCluster(t, nc, 3)
	c.node(0).setFlag("--data-dir", t.TempDir())
	c.start()
	cv := watch(t, c)
	l := newLedger()
	write := func(i int, ack fanoutv1.AckPolicy, prefix string, n int) {
		t.Helper()
		id := c.node(i).spec.ID
		for k := 0; k < n; k += 10 {
			var events []*fanoutv1.Event
			for j := k; j < k+10 && j < n; j++ {
				events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("%s/%s/%03d", prefix, id, j), Payload: fmt.Appendf(nil, "%s/%d", id, j)})
			}
			resp, err := sendSubmit(c.client(i), &fanoutv1.SubmitRequest{Events: events, Ack: ack})
			must(t, err)
			must(t, l.observe(id, events, resp))
		}
	}
	for i := range 3 {
		write(i, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, "before", 30)
	}
	cv.wait(30*time.Second, l, 0, 1, 2)
	// Every message so far is applied and, a save later, its position on disk.
	applied, err := c.node(0).metric("fanout_jetstream_feed_applied_sequence")
	must(t, err)
	eventually(t, 10*time.Second, "node 0 saves its position", func() error {
		saved, err := c.node(0).metric("fanout_jetstream_position_saved_sequence")
		if err == nil && saved < applied {
			err = fmt.Errorf("saved %v, applied %v", saved, applied)
		}
		return err
	})

	c.node(0).kill()
	for i := 1; i < 3; i++ {
		write(i, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, "down", 20)
	}
	cv.restart(0)
	cv.wait(30*time.Second, l, 0, 1, 2)
	if !strings.Contains(c.node(0).log(), `msg="jetstream: resuming the stream"`) && !strings.Contains(c.node(0).log(), `"msg":"jetstream: resuming the stream"`) {
		t.Fatalf("node 0 restarted on its data dir did not resume the stream:\n%s", c.node(0).logTail())
	}
	// Its feed is past the 40 events written while it was down.
	if seq, err := c.node(0).metric("fanout_jetstream_feed_applied_sequence"); err != nil || seq < applied+40 {
		t.Fatalf("node 0's applied sequence after the restart: %v (%v), want at least %v", seq, err, applied+40)
	}

	// QUEUED with no NATS server up: accepted on node 0's disk and in its outbox.
	for i := range 3 {
		nc.Stop(i)
	}
	write(0, fanoutv1.AckPolicy_ACK_POLICY_QUEUED, "queued", 20)
	c.node(0).kill()
	nc.Start(0, 1, 2)
	cv.restart(0)
	cv.wait(60*time.Second, l, 0, 1, 2)
	if n, err := c.node(0).metric("fanout_jetstream_republished_total"); err != nil || n < 20 {
		t.Fatalf("node 0 published again %v events at its restart (%v), want at least the 20 QUEUED ones", n, err)
	}
}
