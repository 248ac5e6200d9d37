package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Versions that keep their promise: coalescing keeps the highest
// (version, origin), never the latest arrival; a write that is not newer than the
// node's entry is answered STALE and not sent; no single write can freeze a key.

var (
	outcomeAccepted = fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED
	outcomeStale    = fanoutv1.EventOutcome_EVENT_OUTCOME_STALE
	ackAll          = fanoutv1.AckPolicy_ACK_POLICY_ALL
	ackPending      = fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING
	ackAcked        = fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED
)

// versioned is a one-request batch of events with app-chosen versions.
func versioned(task string, versions ...uint64) []*fanoutv1.Event {
	var events []*fanoutv1.Event
	for _, v := range versions {
		events = append(events, &fanoutv1.Event{TaskId: task, Version: v, Payload: fmt.Appendf(nil, "v%d", v)})
	}
	return events
}

// submitAckAll sends events to node n with ACK_POLICY_ALL and ack_timeout, and returns
// the response and how long it took.
func submitAckAll(t *testing.T, c *cluster, n int, events []*fanoutv1.Event, timeout time.Duration) (*fanoutv1.SubmitResponse, time.Duration) {
	t.Helper()
	start := time.Now()
	resp := submitResp(t, c, n, &fanoutv1.SubmitRequest{Events: events, Ack: ackAll, AckTimeout: durationpb.New(timeout)}, nil)
	return resp, time.Since(start)
}

// checkResult fails the test unless result i of resp has outcome want and, for STALE,
// names the winning entry cur.
func checkResult(t *testing.T, what string, resp *fanoutv1.SubmitResponse, i int, want fanoutv1.EventOutcome, cur stamp) {
	t.Helper()
	rs := resp.GetResults()
	if len(rs) <= i {
		t.Fatalf("%s: %d results, want result %d: %v", what, len(rs), i, resp)
	}
	r := rs[i]
	switch {
	case r.GetOutcome() != want:
		t.Errorf("%s: results[%d] = %v, want %s", what, i, r, want)
	case want == outcomeAccepted && r.GetRevision() == 0:
		t.Errorf("%s: results[%d] ACCEPTED without a revision: %v", what, i, r)
	case want == outcomeStale && (stamp{r.GetCurrentVersion(), r.GetCurrentOrigin()}) != cur:
		t.Errorf("%s: results[%d] STALE naming (%d, %q), want %s", what, i, r.GetCurrentVersion(), r.GetCurrentOrigin(), cur)
	}
}

// checkNoPending fails the test if any peer of resp is PENDING: the request has no
// version that is still on its way.
func checkNoPending(t *testing.T, what string, resp *fanoutv1.SubmitResponse) {
	t.Helper()
	for _, a := range resp.GetPeerAcks() {
		if a.GetState() == ackPending {
			t.Errorf("%s: peer %s PENDING for a version that is never sent (%v)", what, a.GetPeer(), resp)
		}
	}
}

// waitGet waits until every node in nodes holds task at want (Get).
func waitGet(t *testing.T, c *cluster, task string, want expected, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		n := c.node(i)
		eventually(t, convergeTimeout, fmt.Sprintf("node %s holds %q at %s", n.spec.ID, task, want.Stamp), func() error {
			got, err := getIDs(n, []string{task})
			if err != nil {
				return err
			}
			return diffState(n.spec.ID, got, map[string]expected{task: want}, false)
		})
	}
}

// TestHighestVersionWins checks that coalescing and Submit keep the highest
// (version, origin), never the latest arrival, with real processes:
//   - [v10, v5] in one request: v10 is ACCEPTED, v5 STALE naming (10, A); ALL is
//     satisfied with every peer ACKED; every node holds v10.
//   - v1000, then v500, with C killed: v500 is STALE at A, and at B once B holds
//     v1000; neither response reports a peer PENDING (v500 is never sent); C,
//     restarted, gets v1000 from A's queue, and every node ends on (1000, A).
//   - versions far ahead of the clock (2^64-1; ten minutes ahead, on the sidecar's
//     scale and in Unix nanoseconds) are refused with INVALID_ARGUMENT naming the
//     field, counted in fanout_versions_refused_total, and stored nowhere;
//   - an app's Unix-nanosecond versions are taken and replicated, later ones win,
//     and the sidecar's own versions stay on its clock (not dragged ahead).
func TestHighestVersionWins(t *testing.T) {
	c := startCluster(t, specs(3, "--network-failure-retry-delay=100ms", "--breaker-open=300ms")...)

	t.Run("[v10, v5] in one request", func(t *testing.T) {
		resp, _ := submitAckAll(t, c, 0, versioned("lww/pair", 10, 5), 5*time.Second)
		checkResult(t, "A [v10, v5]", resp, 0, outcomeAccepted, stamp{})
		checkResult(t, "A [v10, v5]", resp, 1, outcomeStale, stamp{10, "A"})
		if !resp.GetSatisfied() || peerAck(t, c, 0, 1, resp).GetState() != ackAcked || peerAck(t, c, 0, 2, resp).GetState() != ackAcked {
			t.Errorf("ALL for [v10, v5] with every peer up: %v; want satisfied, B and C ACKED", resp)
		}
		waitGet(t, c, "lww/pair", expected{Stamp: stamp{10, "A"}, Payload: []byte("v10")}, 0, 1, 2)
	})

	t.Run("v1000 then v500 with a peer down", func(t *testing.T) {
		c.node(2).kill()
		resp, _ := submitAckAll(t, c, 0, versioned("lww/down", 1000), 500*time.Millisecond)
		checkResult(t, "A v1000", resp, 0, outcomeAccepted, stamp{})
		if peerAck(t, c, 0, 1, resp).GetState() != ackAcked {
			t.Errorf("A v1000: B %v, want ACKED", peerAck(t, c, 0, 1, resp))
		}
		t.Logf("A v1000 with C down: C %s", peerAck(t, c, 0, 2, resp).GetState())

		const timeout = 3 * time.Second
		for _, from := range []int{0, 1} {
			what := c.node(from).spec.ID + " v500 after v1000"
			waitGet(t, c, "lww/down", expected{Stamp: stamp{1000, "A"}}, from)
			resp, took := submitAckAll(t, c, from, versioned("lww/down", 500), timeout)
			checkResult(t, what, resp, 0, outcomeStale, stamp{1000, "A"})
			checkNoPending(t, what, resp)
			if !resp.GetSatisfied() || took >= timeout {
				t.Errorf("%s: satisfied %t after %s (ack_timeout %s); want satisfied at once: no accepted event waits for an ack",
					what, resp.GetSatisfied(), ms(took), timeout)
			}
		}

		c.node(2).restart()
		waitGet(t, c, "lww/down", expected{Stamp: stamp{1000, "A"}, Payload: []byte("v1000")}, 0, 1, 2)
		r := subscribeWith(t, c, 2, subOpts{prefix: "lww/down", snapshot: true})
		checkSnapshot(t, r.name, r.waitSnapshot(t, convergeTimeout), map[string]expected{"lww/down": {Stamp: stamp{1000, "A"}, Payload: []byte("v1000")}})
	})

	t.Run("versions far ahead of the clock are refused", func(t *testing.T) {
		ahead := uint64(time.Now().Add(10*time.Minute).UnixMilli()) << 16
		aheadNanos := uint64(time.Now().Add(10 * time.Minute).UnixNano())
		for _, v := range []uint64{math.MaxUint64, ahead, aheadNanos} {
			events := []*fanoutv1.Event{{TaskId: "lww/ok"}, {TaskId: "lww/frozen", Version: v}}
			_, err := sendSubmit(c.client(0), &fanoutv1.SubmitRequest{Events: events})
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "events[1].version") {
				t.Errorf("version %d: %v, want INVALID_ARGUMENT naming events[1].version", v, err)
			}
		}
		got, err := getIDs(c.node(0), []string{"lww/ok", "lww/frozen"})
		if err != nil || len(got) != 0 {
			t.Errorf("after the refused requests A holds %v (%v), want nothing", got, err)
		}
		if n, err := c.node(0).metric("fanout_versions_refused_total", "from", "app"); err != nil || n != 3 {
			t.Errorf("fanout_versions_refused_total{from=app} = %v (%v), want 3", n, err)
		}
		// Within a second of the clock is fine (HLC units: unix ms << 16).
		near := uint64(time.Now().Add(time.Second).UnixMilli()) << 16
		resp := submitResp(t, c, 0, &fanoutv1.SubmitRequest{Events: versioned("lww/near", near)}, nil)
		checkResult(t, "A a version 1s ahead", resp, 0, outcomeAccepted, stamp{})
	})

	t.Run("Unix-nanosecond versions", func(t *testing.T) {
		first := uint64(time.Now().UnixNano())
		resp := submitResp(t, c, 0, &fanoutv1.SubmitRequest{Events: versioned("lww/nanos", first)}, nil)
		checkResult(t, "A a Unix-nanosecond version", resp, 0, outcomeAccepted, stamp{})
		waitGet(t, c, "lww/nanos", expected{Stamp: stamp{first, "A"}}, 0, 1, 2)
		// B writes the key later, in nanoseconds too: its version wins everywhere.
		second := uint64(time.Now().UnixNano())
		resp = submitResp(t, c, 1, &fanoutv1.SubmitRequest{Events: versioned("lww/nanos", second)}, nil)
		checkResult(t, "B a later Unix-nanosecond version", resp, 0, outcomeAccepted, stamp{})
		waitGet(t, c, "lww/nanos", expected{Stamp: stamp{second, "B"}}, 0, 1, 2)
		// The clocks were not dragged to the nanosecond scale: a sidecar-assigned
		// version is still within a second of the wall clock, on every node.
		for i := range 3 {
			r := submitResp(t, c, i, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "lww/clock"}}}, nil)
			if v := r.GetVersions()[0]; v > uint64(time.Now().Add(time.Second).UnixMilli())<<16 {
				t.Errorf("node %s assigned %d after nanosecond versions: its clock was dragged ahead", c.node(i).spec.ID, v)
			}
		}
	})
}
