package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/testpki"
	"github.com/fanout/fanout/pkg/peertls"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Entries that claim the receiver's own origin (issue 25, item 5): a peer must not
// make a node store a write "by itself" that it never made.

// ownOriginLabels are the labels of fanout_own_origin_entries_total.
func ownOriginLabels(path, outcome string) []string {
	return []string{`path="` + path + `"`, `outcome="` + outcome + `"`}
}

// plantedEntry is an anti-entropy entry of key as written by origin now: a fresh
// version, submitted now.
func plantedEntry(t *testing.T, origin, key string) *fanoutv1.SyncEntry {
	t.Helper()
	now := time.Now()
	raw, err := proto.Marshal(&fanoutv1.Event{TaskId: key, Version: uint64(now.UnixMilli()) << 16, Payload: []byte("planted")})
	if err != nil {
		t.Fatal(err)
	}
	return &fanoutv1.SyncEntry{Event: raw, Origin: origin, SubmittedAtUnixNanos: now.UnixNano()}
}

// push sends entries to the peer listener of cli as node id as, and returns how many
// it stored.
func push(t *testing.T, cli fanoutv1.PeerServiceClient, as string, entries ...*fanoutv1.SyncEntry) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Push(ctx, &fanoutv1.PushRequest{NodeId: as, Entries: entries})
	if err != nil {
		t.Fatalf("Push as %s: %v", as, err)
	}
	return resp.GetApplied()
}

// ownOriginAttack is the attack of issue 25 on A, by a peer that reaches the peer
// listeners through dial and calls as node C: a Push to A of an entry claiming A's
// origin, and one to B that B relays to A by anti-entropy. A refuses both (and
// counts them), holds neither, and its app's ACK_ALL write of the keys is accepted,
// acked by both peers, and wins everywhere: the convergence checker passes.
func ownOriginAttack(t *testing.T, c *cluster, dial func(addr string) fanoutv1.PeerServiceClient, l *ledger) {
	t.Helper()
	a, b := c.node(0), c.node(1)
	const direct, relayed = "origin/push", "origin/relay"
	before := mustMetric(t, a, "fanout_own_origin_entries_total", ownOriginLabels("anti_entropy", "refused")...)
	if n := push(t, dial(a.peerAddr), "C", plantedEntry(t, "A", direct)); n != 0 {
		t.Errorf("A stored %d entries of a Push that claims A's origin, want 0", n)
	}
	if got := mustMetric(t, a, "fanout_own_origin_entries_total", ownOriginLabels("anti_entropy", "refused")...); got != before+1 {
		t.Errorf("A counted %v refused entries of its origin after the Push, want %v", got, before+1)
	}
	// B cannot tell: it stores the entry as a relayed write of A's, and anti-entropy
	// carries it to A, which refuses it every round it comes.
	if n := push(t, dial(b.peerAddr), "C", plantedEntry(t, "A", relayed)); n != 1 {
		t.Fatalf("B stored %d entries of a relayed Push, want 1", n)
	}
	eventually(t, convergeTimeout, "A refuses the entry B relays", func() error {
		v, err := a.metric("fanout_own_origin_entries_total", ownOriginLabels("anti_entropy", "refused")...)
		if err == nil && v < before+2 {
			err = fmt.Errorf("refused %v, want at least %v", v, before+2)
		}
		return err
	})
	held, err := getIDs(a, []string{direct, relayed})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 0 {
		t.Fatalf("A holds %v: entries of its origin it never wrote", held)
	}
	// A's app writes both keys, waiting for every peer.
	req := &fanoutv1.SubmitRequest{Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(20 * time.Second),
		Events: []*fanoutv1.Event{{TaskId: direct, Payload: []byte("A's")}, {TaskId: relayed, Payload: []byte("A's")}}}
	resp := submitResp(t, c, 0, req, l)
	for i, r := range resp.GetResults() {
		if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
			t.Fatalf("A's write of %s: %v", req.Events[i].GetTaskId(), r)
		}
	}
	if !resp.GetSatisfied() || len(resp.GetPeerAcks()) != 2 {
		t.Fatalf("A's ACK_ALL write of the planted keys: satisfied %v, peer acks %v; want both peers", resp.GetSatisfied(), resp.GetPeerAcks())
	}
	for _, to := range []int{1, 2} {
		if s := peerAck(t, c, 0, to, resp).GetState(); s != fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED {
			t.Errorf("A's write: peer %s %v, want ACKED", c.node(to).spec.ID, s)
		}
	}
}

// TestOwnOriginRefused: without mutual TLS, where any client of the peer port can
// write as any node. A Replicate to A as A of a key A never wrote is answered
// INVALID and counted, while an echo of A's own write is STALE and not counted; the
// Push attacks are refused and counted (ownOriginAttack). Then A is killed (-9) and
// restarts without a data dir: bootstrap gives it every write of its earlier process back from B and
// C, counted as restored, none refused, and the convergence checker passes again.
func TestOwnOriginRefused(t *testing.T) {
	c := startCluster(t, specs(3, "--anti-entropy-interval=1s")...)
	cv := watch(t, c)
	l := newLedger()
	a := c.node(0)
	mine := submitResp(t, c, 0, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "origin/mine", Payload: []byte("A's")}}}, l)
	dial := func(addr string) fanoutv1.PeerServiceClient { return peerClient(t, addr, insecure.NewCredentials()) }

	replicate := func(key string, v uint64) fanoutv1.ItemStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := dial(a.peerAddr).Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "A",
			Events: []*fanoutv1.Event{{TaskId: key, Version: v, Payload: []byte("planted")}}})
		if err != nil {
			t.Fatalf("Replicate to A as A: %v", err)
		}
		return resp.GetStatuses()[0]
	}
	if s := replicate("origin/mine", mine.GetVersions()[0]); s != fanoutv1.ItemStatus_ITEM_STATUS_STALE {
		t.Errorf("an echo of A's own write: %v, want STALE", s)
	}
	if s := replicate("origin/replicate", uint64(time.Now().UnixMilli())<<16); s != fanoutv1.ItemStatus_ITEM_STATUS_INVALID {
		t.Errorf("a Replicate to A as A of a key it never wrote: %v, want INVALID", s)
	}
	if got := mustMetric(t, a, "fanout_own_origin_entries_total", ownOriginLabels("replicate", "refused")...); got != 1 {
		t.Errorf("A counted %v refused Replicate entries of its origin, want 1 (the echo is not)", got)
	}
	ownOriginAttack(t, c, dial, l)
	cv.wait(convergeTimeout, l, 0, 1, 2)

	// A is killed and restarts without its memory; its peers hold its writes.
	a.kill()
	cv.restart(0)
	cv.wait(convergeTimeout, l, 0, 1, 2)
	if got := mustMetric(t, a, "fanout_own_origin_entries_total", ownOriginLabels("anti_entropy", "refused")...); got != 0 {
		t.Errorf("restarted A refused %v entries of its earlier process, want 0", got)
	}
	_, tasks := l.count()
	if got := mustMetric(t, a, "fanout_own_origin_entries_total", ownOriginLabels("anti_entropy", "restored")...); got < float64(tasks) {
		t.Errorf("restarted A restored %v of its earlier writes, want all %d", got, tasks)
	}
}

// TestOwnOriginRefusedTLS is issue 25's attack under mutual TLS: C, with its own
// valid certificate, Pushes to A an entry claiming A's origin, and one to B that B
// relays to A. A refuses and counts both; its app's ACK_ALL write of the keys is
// acked by both peers and wins everywhere.
func TestOwnOriginRefusedTLS(t *testing.T) {
	ca, _, ss := tlsCluster(t, 3, "--anti-entropy-interval=1s")
	c := startCluster(t, ss...)
	cv := watch(t, c)
	l := newLedger()
	fc := testpki.Must(ca.Write(t.TempDir(), leafFor("C"), ca))
	src, err := peertls.Open(peertls.Config{Files: peertls.Files(fc)})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dial := func(addr string) fanoutv1.PeerServiceClient { return peerClient(t, addr, src.ClientCredentials()) }
	ownOriginAttack(t, c, dial, l)
	cv.wait(convergeTimeout, l, 0, 1, 2)
}
