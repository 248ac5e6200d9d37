package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/credentials/insecure"
)

// TestStateFloodThenDeletes is issue 25's flood: junk keys sent to one node fill
// every state table, and deletes must make room at once.
//
// Each table is bounded at 1,000 keys. X, a peer that is not in the cluster, sends A
// 1,500 junk keys by Replicate: A takes 900 (the peers' share; 100 are kept for A's
// own app) and answers BUSY for 600, counted under source X. Anti-entropy relays
// the 900 to B and C, counted under the peer they came from. Then each app writes
// 100 new keys of its own, its whole reserve: all are ACCEPTED, and every table is
// at 1,000 while it refuses the other apps' keys (BUSY, counted per source; their
// senders keep them and retry). A's app deletes the 1,500 junk keys; its next 300
// new keys are ACCEPTED at once (the tombstones have a bound of their own); the
// deletes reach B and C, the refused keys get in, and the convergence checker
// passes: every table holds the 600 keys of the apps and a tombstone of each junk
// key.
func TestStateFloodThenDeletes(t *testing.T) {
	const bound, junk, own, after = 1000, 1500, 100, 300
	c := startCluster(t, specs(3, fmt.Sprintf("--state-max-keys=%d", bound), "--anti-entropy-interval=1s",
		"--congestion-retry-delay=50ms")...)
	cv := watch(t, c)
	l := newLedger()
	a := c.node(0)

	// The flood: X writes the junk to A, in three requests.
	x := peerClient(t, a.peerAddr, insecure.NewCredentials())
	statuses := map[fanoutv1.ItemStatus]int{}
	version := uint64(time.Now().UnixMilli()) << 16
	for start := 0; start < junk; start += 500 {
		req := &fanoutv1.ReplicateRequest{OriginNode: "X"}
		for i := start; i < start+500; i++ {
			req.Events = append(req.Events, &fanoutv1.Event{TaskId: fmt.Sprintf("junk/%05d", i), Version: version, Payload: []byte("junk")})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := x.Replicate(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("X's Replicate to A: %v", err)
		}
		for _, s := range resp.GetStatuses() {
			statuses[s]++
		}
	}
	if statuses[fanoutv1.ItemStatus_ITEM_STATUS_OK] != peerShare(bound) || statuses[fanoutv1.ItemStatus_ITEM_STATUS_BUSY] != junk-peerShare(bound) {
		t.Fatalf("A answered X's %d junk keys %v; want %d OK (the peers' share of %d) and the rest BUSY", junk, statuses, peerShare(bound), bound)
	}
	waitMetric(t, a, peerWrites("X", "refused"), junk-peerShare(bound))
	waitMetric(t, a, peerWrites("X", "added"), peerShare(bound))
	// Anti-entropy relays the junk to B and C, from A or from each other.
	for _, i := range []int{1, 2} {
		n := c.node(i)
		eventually(t, convergeTimeout, "node "+n.spec.ID+" holds the relayed junk, counted by source", func() error {
			st, err := stateStatus(n)
			if err != nil {
				return err
			}
			added := 0.0
			for _, from := range []string{"A", "B", "C"} {
				v, _ := n.metric("fanout_state_peer_writes_total", `source="`+from+`"`, `outcome="added"`)
				added += v
			}
			if st.GetKeys() != uint64(peerShare(bound)) || added != float64(peerShare(bound)) {
				return fmt.Errorf("keys %d, added by peers %v; want %d", st.GetKeys(), added, peerShare(bound))
			}
			return nil
		})
	}

	// Every app writes its reserve: none is refused.
	for i, n := range c.nodes {
		for _, events := range changes("flood/own/"+n.spec.ID+"/", "v1", own, 50) {
			resp := submitResp(t, c, i, &fanoutv1.SubmitRequest{Events: events}, l)
			for j, r := range resp.GetResults() {
				if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
					t.Fatalf("%s's own write of %s with the table at the peers' share: %v", n.spec.ID, events[j].GetTaskId(), r)
				}
			}
		}
	}
	// Each table is full now and refuses the other apps' keys, counted by source.
	for i, n := range c.nodes {
		st, err := stateStatus(n)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetKeys() != bound {
			t.Errorf("node %s holds %d keys after its app wrote its reserve, want %d", n.spec.ID, st.GetKeys(), bound)
		}
		for j, p := range c.nodes {
			if j != i {
				waitMetric(t, n, peerWrites(p.spec.ID, "refused"), 1)
			}
		}
	}
	refusedAt := mustMetric(t, a, "fanout_state_peer_writes_total", `outcome="refused"`)

	// A's app deletes the junk; new keys get in at once.
	for _, events := range deleteEvery(changes("junk/", "delete", junk, 500), 1) {
		resp := submitResp(t, c, 0, &fanoutv1.SubmitRequest{Events: events}, l)
		for j, r := range resp.GetResults() {
			if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
				t.Fatalf("A's delete of %s: %v", events[j].GetTaskId(), r)
			}
		}
	}
	for _, events := range changes("flood/after/", "v1", after, 100) {
		resp := submitResp(t, c, 0, &fanoutv1.SubmitRequest{Events: events}, l)
		for j, r := range resp.GetResults() {
			if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
				t.Fatalf("A's new key %s right after the deletes: %v", events[j].GetTaskId(), r)
			}
		}
	}
	if st, err := stateStatus(a); err != nil || st.GetTombstones() != junk {
		t.Errorf("A after the deletes: %v, %v; want %d tombstones, apart from its keys", st, err, junk)
	}

	cv.wait(convergeTimeout, l, 0, 1, 2)
	_, tasks := l.count()
	for _, n := range c.nodes {
		eventually(t, convergeTimeout, "node "+n.spec.ID+" holds the apps' keys and a tombstone of each junk key", func() error {
			st, err := stateStatus(n)
			if err != nil {
				return err
			}
			if st.GetKeys() != uint64(3*own+after) || st.GetTombstones() != junk || st.GetCollectedEarly() != 0 {
				return fmt.Errorf("keys %d, tombstones %d, collected early %d; want %d, %d, 0", st.GetKeys(), st.GetTombstones(),
					st.GetCollectedEarly(), 3*own+after, junk)
			}
			return nil
		})
	}
	t.Logf("X's flood: A took %d junk keys, refused %d; B and C took the %d relayed; the apps wrote %d keys each into their reserve, "+
		"none refused, while A refused the others' %v times (BUSY, retried); after A's %d deletes its next %d keys were accepted at once; %d tasks converged",
		peerShare(bound), junk-peerShare(bound), peerShare(bound), own, refusedAt-float64(junk-peerShare(bound)), junk, after, tasks)
}

// peerWrites are the labels of fanout_state_peer_writes_total for source and outcome.
func peerWrites(source, outcome string) []string {
	return []string{`source="` + source + `"`, `outcome="` + outcome + `"`}
}

// waitMetric waits until n's fanout_state_peer_writes_total with labels is at least
// want.
func waitMetric(t *testing.T, n *node, labels []string, want int) {
	t.Helper()
	eventually(t, convergeTimeout, fmt.Sprintf("node %s counts %v >= %d", n.spec.ID, labels, want), func() error {
		v, err := n.metric("fanout_state_peer_writes_total", labels...)
		if err == nil && v < float64(want) {
			err = fmt.Errorf("%v", v)
		}
		return err
	})
}
