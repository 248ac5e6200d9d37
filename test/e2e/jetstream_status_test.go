package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/natstest"
)

// TestJetStreamStatusWithCreds: two sidecar processes on --transport=jetstream reach
// a 3-server NATS cluster in operator (JWT) mode with --nats-creds; once an event one
// accepted reaches the other, GetStatus and `sidecar status` show the transport: the
// bucket, the stream, the connected server (one of the cluster's, no credentials in
// it), replicas 3, the feed at the stream's last sequence with lag 0 and an empty
// outbox.
func TestJetStreamStatusWithCreds(t *testing.T) {
	bin, err := natsServer()
	if err != nil {
		t.Fatal(err)
	}
	cfg := natstest.DefaultConfig()
	cfg.Binary, cfg.Operator = bin, true
	nc := natstest.Start(t, cfg)
	c := newCluster(t, specs(2, "--transport=jetstream", "--nats-url="+strings.Join(nc.URLs(), ","),
		"--nats-creds="+nc.Creds(natstest.AccountApp))...)
	for _, nd := range c.nodes {
		clear(nd.peers)
	}
	for i := range 2 {
		c.node(i).launch()
	}
	for i := range 2 {
		c.node(i).waitReady()
	}
	const n = 10
	for i := range n {
		resp, err := sendSubmit(c.client(0), &fanoutv1.SubmitRequest{Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM,
			Events: []*fanoutv1.Event{{TaskId: fmt.Sprintf("status/%d", i), Payload: []byte("x")}}})
		if err != nil || !resp.GetSatisfied() {
			t.Fatalf("Submit status/%d: %v, %v", i, resp, err)
		}
	}
	for i := range 2 {
		eventually(t, 30*time.Second, fmt.Sprintf("node %d's feed at the stream's last sequence", i), func() error {
			st, err := c.node(i).status()
			if err != nil {
				return err
			}
			tr := st.GetTransport()
			if tr.GetAppliedSequence() != n || tr.GetLastSequence() != n || tr.GetLag() != 0 {
				return fmt.Errorf("transport %v: want applied and last %d, lag 0", tr, n)
			}
			return nil
		})
		st, err := c.node(i).status()
		if err != nil {
			t.Fatal(err)
		}
		tr := st.GetTransport()
		if tr.GetKind() != "jetstream" || tr.GetBucket() != "fanout" || tr.GetStream() != "KV_fanout" || tr.GetReplicas() != 3 ||
			tr.GetOutboxEvents() != 0 || tr.GetServerVersion() == "" {
			t.Errorf("node %d transport = %v: want jetstream, bucket fanout, stream KV_fanout, replicas 3, an empty outbox, a server version", i, tr)
		}
		if !containsURL(nc.URLs(), tr.GetServer()) {
			t.Errorf("node %d transport server = %q, want one of %v", i, tr.GetServer(), nc.URLs())
		}
		out := runStatusCmd(t, c.node(i).appAddr)
		for _, want := range []string{"transport: jetstream   stream KV_fanout   bucket fanout   replicas 3   server " + tr.GetServer(),
			fmt.Sprintf("applied %d/%d   lag 0   outbox 0 events 0 bytes", n, n)} {
			if !strings.Contains(out, want) {
				t.Errorf("node %d: sidecar status lacks %q:\n%s", i, want, out)
			}
		}
	}
}

func containsURL(urls []string, u string) bool {
	for _, x := range urls {
		if x == u {
			return true
		}
	}
	return false
}
