package jetstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/state"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"
)

// member is a fanout node on the JetStream transport, as the sidecar will wire it.
type member struct {
	node *fanout.Node
	tr   *Transport
}

func startMember(t *testing.T, url, id, bucket string, replicas int) *member {
	t.Helper()
	return startMemberOpts(t, url, id, bucket, replicas)
}

func startMemberOpts(t *testing.T, url, id, bucket string, replicas int, opts ...nats.Option) *member {
	t.Helper()
	return startMemberWith(t, url, id, bucket, replicas, nil, opts...)
}

// startMemberWith is startMember with the configs changed by with (if not nil)
// before the node starts.
func startMemberWith(t *testing.T, url, id, bucket string, replicas int, with func(*Config, *fanout.Config), opts ...nats.Option) *member {
	t.Helper()
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	logger := slog.New(slog.NewTextHandler(out, nil))
	cfg := DefaultConfig()
	cfg.Bucket, cfg.Replicas, cfg.Logger = bucket, replicas, logger
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	nodeCfg := fanout.DefaultConfig()
	nodeCfg.NodeID, nodeCfg.Logger = id, logger
	cfg.Limits = nodeCfg.Limits
	if with != nil {
		with(&cfg, &nodeCfg)
	}
	m := &member{}
	nodeCfg.NewTransport = func(n *fanout.Node) (fanout.Transport, error) {
		tr, err := New(cfg, nc, n)
		m.tr = tr
		return tr, err
	}
	n, err := fanout.New(nodeCfg)
	if err != nil {
		t.Fatal(err)
	}
	m.node = n
	t.Cleanup(n.Close) // before the connection's cleanup: cleanups run last first
	return m
}

func (m *member) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-m.node.Ready():
	case <-time.After(30 * time.Second): // an R3 stream's creation waits for its Raft group's election
		_, why := m.node.Readiness()
		t.Fatalf("%s: not ready within 30s: %s", m.node.ID(), why)
	}
}

func (m *member) stamp(key string) (state.Stamp, bool) {
	e, ok := m.node.Table().Get([]byte(key))
	return e.Stamp, ok
}

// waitFor waits until cond holds for the node's table, on its changes, within a
// named deadline.
func (m *member) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	m.waitWithin(t, 10*time.Second, what, cond)
}

func (m *member) waitWithin(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		rev := m.node.Table().Revision()
		if cond() {
			return
		}
		select {
		case <-m.node.Table().Changed(rev):
		case <-deadline:
			t.Fatalf("%s: %s: not within %s", m.node.ID(), what, within)
		}
	}
}

func submit(ctx context.Context, m *member, ack fanoutv1.AckPolicy, evs ...*fanoutv1.Event) (*fanoutv1.SubmitResponse, error) {
	return m.node.Submit(ctx, &fanoutv1.SubmitRequest{Events: evs, Ack: ack, AckTimeout: durationpb.New(10 * time.Second)})
}

// TestTwoNodes: two fanout nodes on one R3 stream, each connected to its own server
// of three. One written before the second
// starts reaches it through the snapshot; Submits with ack QUORUM are satisfied by
// the stream's ack, QUEUED ones leave through the outbox; both nodes converge on
// every key, concurrent writers of one key included; a delete reaches the other; ack
// ALL and an event over max_payload are refused before anything is stored.
func TestTwoNodes(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	a := startMember(t, c.URL(0), "a", "two", 3)
	a.waitReady(t)
	if resp, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: "before/b", Payload: []byte("1")}); err != nil ||
		!resp.GetSatisfied() {
		t.Fatalf("QUORUM Submit on a: %v, %v", resp, err)
	}
	b := startMember(t, c.URL(1), "b", "two", 3)
	b.waitReady(t)
	if _, ok := b.stamp("before/b"); !ok {
		t.Fatal("b is ready without the key a wrote before it started")
	}

	// QUEUED from both sides, then concurrent writers of hot keys.
	for i := range 20 {
		if _, err := submit(ctx, []*member{a, b}[i%2], fanoutv1.AckPolicy_ACK_POLICY_QUEUED,
			&fanoutv1.Event{TaskId: fmt.Sprintf("app/k%d", i), Payload: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, m := range []*member{a, b, a, b} {
		wg.Go(func() {
			for r := range 10 {
				ev := &fanoutv1.Event{TaskId: fmt.Sprintf("hot/%d", r), Payload: []byte(m.node.ID()), Version: uint64(1000 + i*10 + r%3)}
				if _, err := submit(ctx, m, fanoutv1.AckPolicy_ACK_POLICY_ONE, ev); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	keys := []string{"before/b"}
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("app/k%d", i))
	}
	for r := range 10 {
		keys = append(keys, fmt.Sprintf("hot/%d", r))
	}
	// QUEUED events are in the outbox when Submit answers, and a put that meets the
	// other writer's conflicts backs off (100 ms, doubling to 5 s): on a loaded machine
	// (make test beside other tests) the last of them can land after 10 s.
	for _, m := range []*member{a, b} {
		other := map[*member]*member{a: b, b: a}[m]
		m.waitWithin(t, 30*time.Second, "every key converged", func() bool {
			for _, k := range keys {
				sa, oka := m.stamp(k)
				sb, okb := other.stamp(k)
				if !oka || !okb || sa != sb {
					return false
				}
			}
			return true
		})
	}

	// An update of a key a's feed has applied expects its sequence at once: no read.
	st, fd := a.tr.st.Load(), a.tr.fd.Load()
	for deadline := time.After(10 * time.Second); ; {
		if _, ok := a.tr.hints.get(st.prefix + encodeKey("app/k1")); ok {
			break
		}
		select {
		case <-fd.handled:
		case <-deadline:
			t.Fatal("a's feed has no hint for app/k1 within 10s")
		}
	}
	reads := st.reads.Load()
	if _, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: "app/k1", Payload: []byte("v2")}); err != nil {
		t.Fatal(err)
	}
	if got := a.tr.st.Load().reads.Load() - reads; got != 0 {
		t.Fatalf("an update of a key the feed applied read it %d times, want 0 (the feed's hint)", got)
	}
	b.waitFor(t, "a's update of app/k1", func() bool {
		sa, _ := a.stamp("app/k1")
		sb, _ := b.stamp("app/k1")
		return sa == sb
	})

	// A delete on b reaches a.
	if _, err := submit(ctx, b, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: "app/k0", Deleted: true}); err != nil {
		t.Fatal(err)
	}
	a.waitFor(t, "the delete of app/k0", func() bool {
		e, ok := a.node.Table().Get([]byte("app/k0"))
		return ok && e.Deleted
	})

	// Refused at Submit, before the table stores anything.
	_, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_ALL, &fanoutv1.Event{TaskId: "all", Payload: []byte("x")})
	var inv *fanout.InvalidError
	if !errors.As(err, &inv) || inv.Field != "ack" {
		t.Fatalf("ack ALL: %v, want an InvalidError on ack", err)
	}
	// The node takes a payload of 1 MiB; the server's default max_payload is 1 MiB with
	// the headers.
	_, err = submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: "big", Payload: make([]byte, 1<<20)})
	if !errors.As(err, &inv) || inv.Field != "events[0]" || !strings.Contains(err.Error(), "max_payload of 1048576 bytes") ||
		!strings.Contains(err.Error(), "--max-event-bytes") {
		t.Fatalf("an event over max_payload: %v", err)
	}
	for _, k := range []string{"all", "big"} {
		if _, ok := a.stamp(k); ok {
			t.Fatalf("a refused Submit stored %q", k)
		}
	}

	// Status and series.
	if ok, why := a.node.Readiness(); !ok || !strings.Contains(why, "KV_two") {
		t.Fatalf("readiness: %t, %q", ok, why)
	}
	if p := a.tr.Peers(); len(p) != 1 || p[0].GetAddress() != "KV_two" || p[0].GetSucceeded() == 0 {
		t.Fatalf("Peers: %v", p)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.tr)
	if n, err := testutil.GatherAndCount(reg); err != nil || n < 12 {
		t.Fatalf("series: %d, %v", n, err)
	}
	if rep, err := a.node.Drain(ctx); err != nil || rep.Peers != 1 {
		t.Fatalf("Drain: %+v, %v", rep, err)
	}
}

// TestNotReachable: a node whose NATS is not up yet is not ready and says why; a
// Submit that waits for the stream's ack is told at once it cannot have it, and its
// events wait in the outbox with the QUEUED ones; once the server comes up the node
// turns ready and the events reach the stream: a node started then gets them.
func TestNotReachable(t *testing.T) {
	c := startCluster(t, 1)
	c.Stop(0)
	url := c.URL(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := startMemberOpts(t, url, "a", "late", 1, nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	if ok, why := a.node.Readiness(); ok || !strings.Contains(why, "NATS") {
		t.Fatalf("before the server: ready %t, %q", ok, why)
	}
	if _, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUEUED, &fanoutv1.Event{TaskId: "queued", Payload: []byte("q")}); err != nil {
		t.Fatal(err)
	}
	resp, err := submit(ctx, a, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, &fanoutv1.Event{TaskId: "quorum", Payload: []byte("q")})
	if err != nil || resp.GetSatisfied() || len(resp.GetPeerAcks()) != 1 || !strings.Contains(resp.GetPeerAcks()[0].GetDetail(), "NATS unreachable") {
		t.Fatalf("QUORUM Submit while NATS is unreachable: %v, %v", resp, err)
	}

	c.Start(0)
	a.waitReady(t)
	if ok, why := a.node.Readiness(); !ok {
		t.Fatalf("after the server came up: %q", why)
	}
	if _, err := a.node.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	b := startMember(t, url, "b", "late", 1)
	b.waitReady(t)
	for _, k := range []string{"queued", "quorum"} {
		if sa, _ := a.stamp(k); func() bool { sb, ok := b.stamp(k); return !ok || sb != sa }() {
			t.Fatalf("%s: b does not hold a's write after the server came up", k)
		}
	}
}

// TestLeaderKilled: a node publishes with ack QUORUM while the stream's leader is
// killed (SIGKILL): the Submits wait out the election (and the client's reconnect,
// when the leader was its server), and every one that was acknowledged is in the
// stream afterwards, as read from another server.
func TestLeaderKilled(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a := startMemberOpts(t, strings.Join(c.URLs(), ","), "a", "failover", 3, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	a.waitReady(t)
	acked := map[string]state.Stamp{}
	put := func(i int) {
		key := fmt.Sprintf("k/%d", i)
		resp, err := a.node.Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: key, Payload: []byte("v")}},
			Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM, AckTimeout: durationpb.New(30 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetSatisfied() {
			acked[key], _ = a.stamp(key)
		}
	}
	for i := range 20 {
		put(i)
	}
	leader := c.Leader("KV_failover")
	own := a.tr.nc.ConnectedUrl() == c.URL(leader) // the client's own server dies too: it reconnects
	c.Kill(leader)
	for i := 20; i < 60; i++ {
		put(i)
	}
	if len(acked) < 50 {
		t.Fatalf("%d of 60 QUORUM Submits acknowledged across the failover; want them to wait it out", len(acked))
	}
	other := (leader + 1) % 3
	st := openStreamRetry(t, ctx, connect(t, c.URL(other)), testStreamConfig("failover", 3))
	for key, want := range acked {
		cur, err := st.current(ctx, st.prefix+encodeKey(key))
		if err != nil || cur.stamp != want {
			t.Fatalf("%s: acknowledged as %+v; the stream holds %+v (%v)", key, want, cur, err)
		}
	}
	t.Logf("%d of 60 acknowledged across the kill of %s (the client's server: %t); all in the stream", len(acked), c.Name(leader), own)
}
