package mesh

import (
	"context"
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/peers"
)

// TestPendingBudget: a node with one live peer and 20 that never answer, and a
// budget of 2 MiB for all of them, is sent 2,000 events (~10 MiB pending for the
// dead peers without the budget). The dead peers' queues stay within the budget,
// losing their oldest events (counted); the live peer, whose whole backlog (~0.5
// MiB, should its acceptor take every Submit in one step) fits in the half the dead
// ones leave it, gets every event; once the dead peers leave the set, their charge
// goes with them, and Config.ReturnMemory is called once for the 20.
func TestPendingBudget(t *testing.T) {
	const limit, events, perReq = 2 << 20, 2000, 100
	fake := peers.NewFakeNetwork()
	addrs := []string{"b"}
	for i := range 20 {
		addrs = append(addrs, fmt.Sprintf("dead%d", i)) // no handler: connection refused
	}
	var returned tally // Config.ReturnMemory calls
	a := fakeMember(t, fake, "a", "a", addrs, func(c *nodeConfig) {
		c.ReturnMemory = returned.Add
		c.MaxPendingBytes, c.PeerRemovalGrace, c.Node.Limits.MaxEventBytes = limit, 0, 1024
	})
	b := fakeMember(t, fake, "b", "b", nil, nil)
	for i := 0; i < events; i += perReq {
		req := &fanoutv1.SubmitRequest{}
		for k := i; k < i+perReq; k++ {
			req.Events = append(req.Events, ev(fmt.Sprintf("budget/%05d", k), "a payload of some thirty bytes."))
		}
		if _, err := a.submit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		// Every acceptor takes a step per Submit, as the round trip of a Submit over
		// gRPC used to let them: Submits in a tight loop in process can outrun the dead
		// peers' acceptors, whose charge then stays over their half for a moment, and
		// b, over its share during the burst, loses events to them. No event says an
		// acceptor took an offer, and the dead peers' batchers never empty.
		poll(t, "every acceptor to take the Submit", func() bool {
			for _, p := range a.node.Status().GetPeers() {
				if p.GetAcceptorQueue() != 0 {
					return false
				}
			}
			return true
		})
	}
	poll(t, "every peer to take every event", func() bool { // their counters: as above
		for _, p := range a.node.Status().GetPeers() {
			if p.GetAccepted() != events || p.GetAcceptorQueue() != 0 {
				return false
			}
		}
		return true
	})
	for k := range events { // b holds every event
		waitKey(t, b, fmt.Sprintf("budget/%05d", k))
	}
	st := a.mesh.PendingBudget()
	// Within the limit once every batcher has taken a step, but for one task each.
	task := wire.ReplicateItemBytes(1024) + batcher.TaskOverhead[wire.Outgoing]()
	if st.Limit != limit || st.Accounts != 21 || st.Used > limit+int64(21*task) || st.Evicted == 0 {
		t.Errorf("budget %+v: want its limit %d over 21 peers, used within it, events evicted", st, limit)
	}
	linkDrained(t, linkTo(t, a.mesh, "b"), "a to see b's answers", func() bool { return peerByAddr(a.node.Status(), "b").GetSucceeded() == events })
	if p := peerByAddr(a.node.Status(), "b"); p.GetOverflow() != 0 {
		t.Errorf("live peer b: %v, want none evicted", p)
	}
	if err := a.mesh.SetPeers([]string{"b"}); err != nil {
		t.Fatal(err)
	}
	// The last of them to close, after every other, returns the memory.
	waitOn(t, "the dead peers' charge to go with them", returned.Changed, func() bool {
		s := a.mesh.PendingBudget()
		return s.Accounts == 1 && s.Used == 0
	})
	waitOn(t, "the memory of the 20 peers that left to be returned, once", returned.Changed, func() bool { return returned.Count() == 1 })
	if n := seriesOf(t, a.node, "dead0"); n != 0 {
		t.Errorf("%d series of a dead peer that left", n)
	}
}
