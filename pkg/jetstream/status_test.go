package jetstream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/nats-io/nats.go"
)

// TestStatus: the transport's status (GetStatus transport) names the stream, the
// bucket, the server it is connected to (without the password in its URL), the
// server's version and the stream's replicas; after a second node's writes its feed
// has applied up to the stream's last sequence with lag 0 and an empty outbox; a
// transport not connected yet says so, with the stream and bucket already set.
func TestStatus(t *testing.T) {
	c := startCluster(t, 3)
	a := startMember(t, c.URL(0), "status-a", "status", 3)
	b := startMember(t, strings.Replace(c.URL(1), "nats://", "nats://someone:secret@", 1), "status-b", "status", 3)
	a.waitReady(t)
	b.waitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 5
	for i := range n {
		resp, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: fmt.Sprintf("s/%d", i), Payload: []byte("x")})
		if err != nil || !resp.GetSatisfied() {
			t.Fatalf("Submit s/%d: %v, %v", i, resp, err)
		}
	}
	b.waitFor(t, "every event", func() bool { _, ok := b.stamp(fmt.Sprintf("s/%d", n-1)); return ok })
	// The feed moves its position just after it applied a message: a reader of the
	// table can see the key a moment before the status has its sequence.
	for _, m := range []*member{a, b} {
		waitUntil(t, 10*time.Second, m.node.ID()+"'s feed past the last message", func() bool {
			return m.node.Status().GetTransport().GetAppliedSequence() >= n
		})
	}

	st := b.node.Status().GetTransport()
	if st.GetKind() != "jetstream" || st.GetStream() != "KV_status" || st.GetBucket() != "status" || st.GetReplicas() != 3 {
		t.Errorf("status = %v, want kind jetstream, stream KV_status, bucket status, replicas 3", st)
	}
	if !strings.HasPrefix(st.GetServer(), "nats://") || strings.Contains(st.GetServer(), "secret") || c.Index(serverName(t, b.tr.nc)) < 0 {
		t.Errorf("server = %q: want the connected server's URL, without the password", st.GetServer())
	}
	if st.GetServerVersion() != b.tr.nc.ConnectedServerVersion() || st.GetServerVersion() == "" {
		t.Errorf("server_version = %q, want %q", st.GetServerVersion(), b.tr.nc.ConnectedServerVersion())
	}
	// The stream holds the n messages (one per key, no other writer): the feed applied
	// up to its last sequence.
	if st.GetAppliedSequence() != n || st.GetLastSequence() != n || st.GetLag() != 0 {
		t.Errorf("applied %d, last %d, lag %d: want %d, %d, 0", st.GetAppliedSequence(), st.GetLastSequence(), st.GetLag(), n, n)
	}
	if st.GetOutboxEvents() != 0 || st.GetOutboxBytes() != 0 || st.GetReconnects() != 0 {
		t.Errorf("outbox %d events %d bytes, reconnects %d: want 0, 0, 0", st.GetOutboxEvents(), st.GetOutboxBytes(), st.GetReconnects())
	}
	if sa := a.node.Status().GetTransport(); sa.GetAppliedSequence() != n || sa.GetLag() != 0 {
		t.Errorf("the writer's own feed: applied %d, lag %d; want %d, 0", sa.GetAppliedSequence(), sa.GetLag(), n)
	}

	down := startMemberOpts(t, "nats://127.0.0.1:1", "status-down", "status", 3, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	st = down.node.Status().GetTransport()
	if st.GetKind() != "jetstream" || st.GetStream() != "KV_status" || st.GetServer() != "" || st.GetReplicas() != 0 || st.GetAppliedSequence() != 0 {
		t.Errorf("status not connected = %v, want kind and stream, no server, replicas or sequence", st)
	}
}

// serverName is the server_name of the server nc is connected to.
func serverName(t *testing.T, nc *nats.Conn) string {
	t.Helper()
	name := nc.ConnectedServerName()
	if name == "" {
		t.Fatal("not connected")
	}
	return name
}
