package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ackSubmitMargin is how much longer than its ack_timeout a Submit's call deadline
// is: the node answers at the ack_timeout with the PeerAck list, which must still
// reach the caller on a slow machine.
const ackSubmitMargin = 10 * time.Second

// warmUpTimeout bounds warmUp: A's first event to a peer may find its connection in
// gRPC's reconnect backoff (at most 2s) from the bootstrap, before the peer listened,
// and then wait the network-failure retry delay (1s), late on a loaded machine.
const warmUpTimeout = 20 * time.Second

// ackRequest is a Submit of one event per id with ack policy p and ack_timeout timeout.
func ackRequest(p fanoutv1.AckPolicy, timeout time.Duration, ids ...string) *fanoutv1.SubmitRequest {
	req := &fanoutv1.SubmitRequest{Ack: p, AckTimeout: durationpb.New(timeout)}
	for _, id := range ids {
		req.Events = append(req.Events, &fanoutv1.Event{TaskId: id, Payload: []byte("v")})
	}
	return req
}

// ackSubmit submits ackRequest(p, timeout, ids...) to node from, fails the test on an
// error, and returns the answer and how long it took.
func ackSubmit(t *testing.T, c *cluster, from int, p fanoutv1.AckPolicy, timeout time.Duration, ids ...string) (*fanoutv1.SubmitResponse, time.Duration) {
	t.Helper()
	req := ackRequest(p, timeout, ids...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+ackSubmitMargin)
	defer cancel()
	start := time.Now()
	resp, err := c.client(from).Submit(ctx, req)
	if err != nil {
		t.Fatalf("Submit %s: %v", p, err)
	}
	return resp, time.Since(start)
}

// peerAck returns the PeerAck of node `to` as seen from a response of node `from`.
func peerAck(t *testing.T, c *cluster, from, to int, resp *fanoutv1.SubmitResponse) *fanoutv1.PeerAck {
	t.Helper()
	addr := c.node(from).peers[to]
	for _, a := range resp.GetPeerAcks() {
		if a.GetPeer() == addr {
			return a
		}
	}
	t.Fatalf("no PeerAck for %s in %v", addr, resp.GetPeerAcks())
	return nil
}

// warmUp submits one event to A and waits until A has delivered it to each of the
// peers to: A's connections to them are then up. A starts before its peers, so its
// bootstrap finds them unreachable, and gRPC keeps a connection that failed fast-
// failing until it has reconnected (sticky TRANSIENT_FAILURE, up to --peers' reconnect
// backoff): a Replicate sent meanwhile fails at once, and A pauses that peer for
// --network-failure-retry-delay. A test that times A's first deliveries, or needs a
// Replicate to hang on a frozen peer, warms up first.
func warmUp(t *testing.T, c *cluster, to ...int) {
	t.Helper()
	before := make([]uint64, len(to))
	for k, i := range to {
		p, err := c.node(0).peerStatus(i)
		if err != nil {
			t.Fatal(err)
		}
		before[k] = p.GetSucceeded()
	}
	submitResp(t, c, 0, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "acks/warm-up"}}}, nil)
	for k, i := range to {
		eventually(t, warmUpTimeout, "A delivers the warm-up to "+c.node(i).spec.ID, func() error {
			p, err := c.node(0).peerStatus(i)
			if err == nil && p.GetSucceeded() == before[k] {
				return fmt.Errorf("succeeded %d, breaker %s, transient %d", p.GetSucceeded(), p.GetBreaker(), p.GetTransient())
			}
			return err
		})
	}
}

func TestAcks(t *testing.T) {
	all, one := fanoutv1.AckPolicy_ACK_POLICY_ALL, fanoutv1.AckPolicy_ACK_POLICY_ONE
	const ackedState = fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED

	t.Run("ALL with every peer up", func(t *testing.T) {
		c := startCluster(t, specs(3)...)
		resp, _ := ackSubmit(t, c, 0, all, 5*time.Second, "acks/a", "acks/b")
		if !resp.GetSatisfied() || peerAck(t, c, 0, 1, resp).GetState() != ackedState || peerAck(t, c, 0, 2, resp).GetState() != ackedState {
			t.Fatalf("ALL with every peer up: %v", resp)
		}
		logAckLatency(t, c)
	})

	t.Run("ALL with a killed peer is unsatisfied and names it; ONE is satisfied", func(t *testing.T) {
		c := startCluster(t, specs(3)...)
		warmUp(t, c, 1, 2) // B must ack within the ack_timeout
		c.node(2).kill()
		const timeout = 700 * time.Millisecond
		resp, took := ackSubmit(t, c, 0, all, timeout, "acks/k")
		dead := peerAck(t, c, 0, 2, resp)
		if resp.GetSatisfied() || peerAck(t, c, 0, 1, resp).GetState() != ackedState || dead.GetState() == ackedState {
			t.Fatalf("ALL with C killed: %v", resp)
		}
		if took < timeout {
			t.Errorf("ALL returned after %s, before its %s ack_timeout (C was reported %s)", took, timeout, dead.GetState())
		}
		t.Logf("ALL with C dead: %s after %s (detail %q)", dead.GetState(), took, dead.GetDetail())
		resp, took = ackSubmit(t, c, 0, one, 5*time.Second, "acks/one")
		if !resp.GetSatisfied() || peerAck(t, c, 0, 1, resp).GetState() != ackedState {
			t.Fatalf("ONE with B alive: %v", resp)
		}
		t.Logf("ONE with one peer alive: satisfied in %s", took)
	})

	t.Run("DROPPED when a tiny buffer overflows", func(t *testing.T) {
		c := startCluster(t, specs(3, "--max-buffer=1", "--workers=1", "--max-batch=1")...)
		warmUp(t, c, 2) // so that a Replicate to frozen C hangs rather than fails fast
		c.node(2).signal(syscall.SIGSTOP)
		// C hangs: A's only worker for C stays busy
		defer c.node(2).signal(syscall.SIGCONT)
		if _, err := c.client(0).Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "acks/hold"}}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, stepTimeout, "A's worker for C to be busy", func() error {
			p, err := c.node(0).peerStatus(2)
			if err == nil && p.GetInFlight() != 1 {
				return fmt.Errorf("in flight %d, want 1", p.GetInFlight())
			}
			return err
		})
		resp, _ := ackSubmit(t, c, 0, all, 3*time.Second, "acks/y", "acks/z")
		d := peerAck(t, c, 0, 2, resp)
		if resp.GetSatisfied() || d.GetState() != fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED || !strings.Contains(d.GetDetail(), "overflow") {
			t.Fatalf("overflow at C: %v; want C DROPPED with reason overflow", resp)
		}
	})
}

// logAckLatency reports Submit latency for one event with QUEUED against ALL on this
// 3-node loopback cluster (docs/BENCHMARKS.md); it is a figure, not an assertion.
func logAckLatency(t *testing.T, c *cluster) {
	const n = 200
	for _, p := range []fanoutv1.AckPolicy{fanoutv1.AckPolicy_ACK_POLICY_QUEUED, fanoutv1.AckPolicy_ACK_POLICY_ALL} {
		lat := make([]time.Duration, n)
		for i := range n {
			resp, took := ackSubmit(t, c, 0, p, 5*time.Second, "acks/lat")
			if !resp.GetSatisfied() {
				t.Fatalf("%s unsatisfied: %v", p, resp)
			}
			lat[i] = took
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		t.Logf("Submit latency %s over %d calls: p50 %s p99 %s", p, n, lat[n/2], lat[n*99/100])
	}
}
