package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/natstest"
)

// natsServer is the pinned nats-server (internal/natstest), built on first use: only
// the JetStream tests need it.
var natsServer = sync.OnceValues(func() (string, error) { return natstest.Build(buildDir) })

// startNATS starts a cluster of n pinned NATS servers with JetStream on loopback,
// stopped when the test ends.
func startNATS(t *testing.T, n int) *natstest.Cluster {
	t.Helper()
	bin, err := natsServer()
	if err != nil {
		t.Fatal(err)
	}
	cfg := natstest.DefaultConfig()
	cfg.Binary, cfg.Servers = bin, n
	return natstest.Start(t, cfg)
}

// jetStreamCluster is n sidecars on --transport=jetstream, on the NATS cluster nc,
// unstarted: they have no peers (--peers is refused on this transport).
func jetStreamCluster(t *testing.T, nc *natstest.Cluster, n int) *cluster {
	t.Helper()
	c := newCluster(t, specs(n, "--transport=jetstream", "--nats-url="+strings.Join(nc.URLs(), ","))...)
	for _, nd := range c.nodes {
		clear(nd.peers)
	}
	return c
}

// TestJetStreamConverges: three sidecars on a 3-server JetStream cluster, each
// submitting its own keys and one shared key, converge on every winner (the
// convergence checker: deliveries, state tables, no stream going backwards); a fourth
// started afterwards turns ready and its Subscribe snapshot holds every key; `sidecar
// status` shows the stream as the one row.
func TestJetStreamConverges(t *testing.T) {
	nc := startNATS(t, 3)
	c := jetStreamCluster(t, nc, 4)
	for i := range 3 {
		c.node(i).launch()
	}
	for i := range 3 {
		c.node(i).waitReady()
	}
	cv := watch(t, c)
	l := newLedger()
	const perNode = 50
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			id := c.node(i).spec.ID
			for b := 0; b < perNode; b += 10 {
				events := []*fanoutv1.Event{{TaskId: "js/shared", Payload: fmt.Appendf(nil, "shared@%s/%d", id, b)}}
				for k := b; k < b+10; k++ {
					events = append(events, &fanoutv1.Event{TaskId: fmt.Sprintf("js/%s/%03d", id, k), Payload: fmt.Appendf(nil, "%s/%d", id, k)})
				}
				resp, err := sendSubmit(c.client(i), &fanoutv1.SubmitRequest{Events: events, Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM})
				if err == nil {
					err = l.observe(id, events, resp)
				}
				if err != nil {
					errs[i] = fmt.Errorf("node %s: %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	cv.wait(30*time.Second, l, 0, 1, 2)

	late := c.node(3)
	late.launch()
	late.waitReady()
	cv.open(3, subOpts{snapshot: true})
	cv.wait(30*time.Second, l, 0, 1, 2, 3)
	if events, tasks := l.count(); tasks != 3*perNode+1 {
		t.Fatalf("the ledger has %d tasks of %d events, want %d", tasks, events, 3*perNode+1)
	}

	out := runStatusCmd(t, late.appAddr)
	if lineWith(out, "KV_fanout") == "" {
		t.Errorf("sidecar status has no row for the stream KV_fanout:\n%s", out)
	}
}

// TestJetStreamRefusesPeers: `serve --transport=jetstream --peers=...` exits 1 at
// once with an error naming both flags, before it opens anything.
func TestJetStreamRefusesPeers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addrs := freeAddrs(t, 2)
	cmd := exec.CommandContext(ctx, sidecarBin, "serve", "--transport=jetstream", "--nats-url=nats://"+addrs[0],
		"--peers=127.0.0.1:7071", "--app-addr="+addrs[1], "--admin-addr=")
	cmd.Env = (&node{}).env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("serve --transport=jetstream --peers: %v, want exit status 1\n%s", err, stderr.String())
	}
	const want = "--peers: not used with --transport=jetstream (the stream carries the events): remove it"
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
	}
}
