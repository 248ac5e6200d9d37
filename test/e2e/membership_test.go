package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/dnstest"
)

// dnsCluster is a cluster found by name, as on Kubernetes: each node on its own
// loopback address (127.0.0.11, .12, …) with the same ports as the others, like pods,
// and a real DNS server (dnsmasq) whose A records for one name list them, like a
// headless Service. Nodes start with no --peers: DNS is all they know.
type dnsCluster struct {
	*cluster
	dns                          *dnstest.Server
	name                         string
	appPort, peerPort, adminPort string
	flags                        []string
	dir                          string
}

const dnsName = "fanout-peers.test"

func newDNSCluster(t *testing.T, flags ...string) *dnsCluster {
	t.Helper()
	dns := dnstest.Start(t)
	ports := freeAddrs(t, 3) // the port numbers; each node binds them on its own address
	port := func(i int) string { _, p, _ := net.SplitHostPort(ports[i]); return p }
	c := &cluster{t: t}
	t.Cleanup(c.cleanup)
	return &dnsCluster{cluster: c, dns: dns, name: dnsName, appPort: port(0), peerPort: port(1), adminPort: port(2),
		flags: flags, dir: t.TempDir()}
}

func (d *dnsCluster) ip(i int) string { return fmt.Sprintf("127.0.0.%d", 11+i) }

func (d *dnsCluster) peerAddr(i int) string { return net.JoinHostPort(d.ip(i), d.peerPort) }

// add makes node i (the next index) with node id id, not started.
func (d *dnsCluster) add(id string) int {
	i := len(d.nodes)
	n := &node{
		t: d.t, index: i, spec: nodeSpec{ID: id, Flags: append([]string{
			"--peers-dns=" + d.name + ":" + d.peerPort,
			"--dns-server=" + d.dns.Addr(),
		}, d.flags...)},
		appAddr:   net.JoinHostPort(d.ip(i), d.appPort),
		peerAddr:  d.peerAddr(i),
		adminAddr: net.JoinHostPort(d.ip(i), d.adminPort),
		peers:     map[int]string{},
		logPath:   filepath.Join(d.dir, fmt.Sprintf("node%d-%s.log", i, id)),
	}
	d.nodes = append(d.nodes, n)
	return i
}

// publish makes the DNS name list exactly the nodes idx.
func (d *dnsCluster) publish(idx ...int) {
	var ips []string
	for _, i := range idx {
		ips = append(ips, d.ip(i))
	}
	d.dns.SetHosts(map[string][]string{d.name: ips})
}

// peerSet returns the addresses node i replicates to (removing ones left out).
func (d *dnsCluster) peerSet(i int) ([]string, error) {
	st, err := d.node(i).status()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range st.GetPeers() {
		if !p.GetRemoving() {
			out = append(out, p.GetAddress())
		}
	}
	slices.Sort(out)
	return out, nil
}

// waitPeers waits until every node of on has exactly the others of set as peers.
func (d *dnsCluster) waitPeers(timeout time.Duration, set []int, on ...int) {
	d.t.Helper()
	for _, i := range on {
		var want []string
		for _, j := range set {
			if j != i {
				want = append(want, d.peerAddr(j))
			}
		}
		slices.Sort(want)
		eventually(d.t, timeout, fmt.Sprintf("node %s's peers %v", d.node(i).spec.ID, want), func() error {
			got, err := d.peerSet(i)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("peers %v", got)
			}
			return nil
		})
	}
}

// Deadlines of TestDNSMembership. Each bounds a wait for an event and is generous for
// a loaded 2-core machine (load average 25); a healthy run ends its waits far sooner.
const (
	// dnsPeersTimeout: from a DNS change to every node's peer set matching it. One
	// --peers-refresh (1s) and a lookup, on a machine that may run both late.
	dnsPeersTimeout = 15 * time.Second
	// dnsBreakerTimeout: from a new node's start to the breakers of the nodes that
	// called it before it listened closing: --breaker-open (300ms), then one probe
	// that the node answers.
	dnsBreakerTimeout = 15 * time.Second
	// dnsAckTimeout: the ack_timeout of a write that every peer can acknowledge, one
	// Replicate round trip away.
	dnsAckTimeout = 15 * time.Second
	// dnsRemovalAckTimeout: the ack_timeout of the write that waits for two peers
	// that die: their removal from DNS, one --peers-refresh (1s) and
	// --peer-removal-grace (2s) settle it; a timeout would answer PENDING instead.
	dnsRemovalAckTimeout = 30 * time.Second
	// dnsRemovedTimeout: from the grace's end to a removed peer's link, series and
	// goroutines gone.
	dnsRemovedTimeout = 15 * time.Second
	// dnsBackoffTimeout: from the DNS server frozen to two lookups timed out, the
	// interval then 4s: 1s + 1s timeout + 2s + 1s timeout, late on a slow machine.
	dnsBackoffTimeout = 30 * time.Second
	// dnsResetTimeout: from the DNS server resumed to a successful lookup: the
	// interval, at most 10 x --peers-refresh, and one lookup.
	dnsResetTimeout = 30 * time.Second
	// dnsConflictTimeout: from a twin named in DNS to both conflicts shown: one
	// --peers-refresh, then the first anti-entropy round with the twin, whose answer
	// carries its id and incarnation.
	dnsConflictTimeout = 15 * time.Second
	// dnsLoadEvents is how many events the background load submits (accepted,
	// over all origins) before a step goes on: the step then runs under load,
	// however slow the machine.
	dnsLoadEvents = 150
)

// TestDNSMembership runs a cluster found by name through what a Deployment does to
// it (issue 11), with a convergence check after every step:
//   - 3 nodes find each other by DNS alone, each leaving its own address out;
//   - scaled to 5 under load: the old nodes add the new ones at once (the new ones'
//     first calls trigger a lookup) and the new ones get the old state by catch-up;
//   - scaled back to 3: the removed nodes' pending events are dropped after
//     --peer-removal-grace (ack waiters settled DROPPED "peer removed"), and no
//     goroutine or /metrics series of theirs is left;
//   - the DNS server frozen: the mesh is unchanged, lookups time out and the refresh
//     interval doubles, then resets once DNS answers;
//   - a node started with another's id: a conflict, loud (ERROR log, GetStatus,
//     /metrics) and not silent (ack ALL not satisfied).
func TestDNSMembership(t *testing.T) {
	d := newDNSCluster(t, "--peers-refresh=1s", "--peer-removal-grace=2s", "--network-failure-retry-delay=100ms",
		"--breaker-open=300ms", "--log-level=debug")
	for _, id := range []string{"A", "B", "C"} {
		d.add(id)
	}
	d.publish(0, 1, 2)
	d.start()
	d.waitPeers(dnsPeersTimeout, []int{0, 1, 2}, 0, 1, 2)
	if resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, dnsAckTimeout, "dns/first"); !resp.GetSatisfied() ||
		len(resp.GetPeerAcks()) != 2 {
		t.Fatalf("ack ALL on a cluster found by DNS: %v", resp)
	}
	// Every node sends to every other before the goroutines are counted, so that each
	// has its peers' replicate streams open, as it has under the load below.
	for _, i := range []int{1, 2} {
		if resp, _ := ackSubmit(t, d.cluster, i, fanoutv1.AckPolicy_ACK_POLICY_ALL, dnsAckTimeout, "dns/first-"+d.node(i).spec.ID); !resp.GetSatisfied() {
			t.Fatalf("ack ALL from %s: %v", d.node(i).spec.ID, resp)
		}
	}
	cv := watch(t, d.cluster)
	goroutines := make([]float64, 3)
	for i := range 3 {
		goroutines[i] = mustMetric(t, d.node(i), "go_goroutines")
	}

	// The load: A, B and C each update 40 keys of their own, 5 per request, every 20ms.
	l := newLedger()
	stopLoad := backgroundLoad(t, d.cluster, []int{0, 1, 2}, "dns/", 40, 5, l)
	waitLoad(t, l, dnsLoadEvents)

	t.Run("scaled to 5 under load", func(t *testing.T) {
		d.add("D")
		d.add("E")
		d.publish(0, 1, 2, 3, 4)
		for _, i := range []int{3, 4} {
			d.node(i).launch()
		}
		for _, i := range []int{3, 4} {
			d.node(i).waitReady()
			cv.streams = append(cv.streams, nil)
			cv.open(i, subOpts{snapshot: true})
		}
		// The new nodes called the old ones while bootstrapping, which made the old
		// ones look DNS up at once.
		d.waitPeers(dnsPeersTimeout, []int{0, 1, 2, 3, 4}, 0, 1, 2, 3, 4)
		// DNS named D and E before they listened, so A's load was refused by them
		// until then; on a slow machine that is enough failed calls to open A's
		// breakers for them, and an ack ALL fails at once on an open breaker
		// ("circuit breaker open"). They close at the first probe D and E answer.
		d.node(0).waitBreakersClosed(dnsBreakerTimeout)
		resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, dnsAckTimeout, "dns/after-scale-up")
		if !resp.GetSatisfied() || len(resp.GetPeerAcks()) != 4 {
			t.Fatalf("ack ALL after scaling to 5: %v, want 4 peers acked", resp)
		}
		waitLoad(t, l, dnsLoadEvents) // load with 5 nodes
	})

	t.Run("scaled back to 3", func(t *testing.T) {
		// A write from A waits for every peer while D and E die; D and E never
		// answer it. It must reach A while A's breakers for them are closed (on an
		// open one the write fails at once) and while DNS still names them. So D and
		// E first stop answering (SIGSTOP): calls to them hang, which a breaker does
		// not count (congestion), and A's breakers stay closed. Once A has stored the
		// write, its ack wait is registered (the same call, next), with D and E
		// pending; once every node holds events for D and E (which it will drop),
		// the pods are gone, their addresses in DNS a moment more.
		d.node(0).waitBreakersClosed(dnsBreakerTimeout)
		for _, i := range []int{3, 4} {
			d.node(i).signal(syscall.SIGSTOP)
		}
		const key = "dns/waits-for-removed"
		waited := submitAsync(d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, dnsRemovalAckTimeout, key)
		eventually(t, submitTimeout, "A to store "+key, func() error { return d.node(0).hasKey(key) })
		// Every node has events of its load unsent to D and E, which it will drop.
		for i := range 3 {
			for _, gone := range []int{3, 4} {
				eventually(t, submitTimeout, fmt.Sprintf("node %s to hold events for %s", d.node(i).spec.ID, d.node(gone).spec.ID), func() error {
					p, err := d.node(i).peerStatusAt(d.peerAddr(gone))
					if err == nil && p.GetAcceptorQueue()+p.GetReprocessQueue()+p.GetPending()+p.GetInFlight() == 0 {
						err = fmt.Errorf("nothing unsent")
					}
					return err
				})
			}
		}
		for _, i := range []int{3, 4} {
			d.node(i).signal(syscall.SIGKILL)
			d.node(i).wait(exitTimeout)
		}
		d.publish(0, 1, 2)
		d.waitPeers(dnsPeersTimeout, []int{0, 1, 2}, 0, 1, 2)
		r := <-waited
		if r.err != nil {
			t.Fatalf("Submit with ack ALL waiting for removed peers: %v", r.err)
		}
		resp := r.resp
		for _, a := range resp.GetPeerAcks() {
			removed := a.GetPeer() == d.peerAddr(3) || a.GetPeer() == d.peerAddr(4)
			if removed && (a.GetState() != fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED || !strings.Contains(a.GetDetail(), "peer removed")) {
				t.Errorf("ack of removed %s: %v, want DROPPED peer removed", a.GetPeer(), a)
			}
		}
		if resp.GetSatisfied() {
			t.Errorf("ack ALL with two peers removed unanswered: satisfied %v", resp)
		}
		stopLoad()
		cv.wait(convergeTimeout, l, 0, 1, 2)
		for i := range 3 {
			n := d.node(i)
			eventually(t, dnsRemovedTimeout, "removed peers stopped on "+n.spec.ID, func() error {
				st, err := n.status()
				if err != nil {
					return err
				}
				if len(st.GetPeers()) != 2 {
					return fmt.Errorf("%d peers shown", len(st.GetPeers()))
				}
				return nil
			})
			if got := mustMetric(t, n, "fanout_peer_removed_dropped_events_total"); got == 0 {
				t.Errorf("node %s dropped nothing for its removed peers; they had pending events", n.spec.ID)
			}
			for _, gone := range []int{3, 4} {
				if v, err := n.metric("fanout_peer_events_total", `peer="`+d.peerAddr(gone)+`"`); err == nil {
					t.Errorf("node %s still exports series of removed %s: %v", n.spec.ID, d.peerAddr(gone), v)
				}
			}
			eventually(t, dnsRemovedTimeout, "goroutines of "+n.spec.ID+" back to their number with 2 peers", func() error {
				if got := mustMetric(t, n, "go_goroutines"); got > goroutines[i] {
					return fmt.Errorf("%v goroutines, %v before scaling up", got, goroutines[i])
				}
				return nil
			})
		}
		events, tasks := l.count()
		t.Logf("%d events on %d keys, 3 → 5 → 3 nodes: every node converged", events, tasks)
	})

	t.Run("DNS server frozen", func(t *testing.T) {
		d.dns.Pause()
		n := d.node(0)
		eventually(t, dnsBackoffTimeout, "the refresh interval to double twice", func() error {
			if v := mustMetric(t, n, "fanout_peers_dns_refresh_interval_seconds"); v < 4 {
				return fmt.Errorf("interval %vs", v)
			}
			return nil
		})
		if got := mustMetric(t, n, "fanout_peers_dns_lookups_total", `outcome="timeout"`); got < 2 {
			t.Errorf("%v lookups timed out, want at least 2", got)
		}
		d.waitPeers(dnsPeersTimeout, []int{0, 1, 2}, 0, 1, 2) // the mesh is unchanged
		if resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, dnsAckTimeout, "dns/while-frozen"); !resp.GetSatisfied() {
			t.Errorf("ack ALL with DNS frozen: %v", resp)
		}
		before := mustMetric(t, n, "fanout_peers_dns_lookups_total", `outcome="success"`)
		d.dns.Resume()
		eventually(t, dnsResetTimeout, "the refresh interval to reset", func() error {
			if v := mustMetric(t, n, "fanout_peers_dns_refresh_interval_seconds"); v != 1 {
				return fmt.Errorf("interval %vs", v)
			}
			if got := mustMetric(t, n, "fanout_peers_dns_lookups_total", `outcome="success"`); got <= before {
				return fmt.Errorf("no successful lookup yet")
			}
			return nil
		})
		d.waitPeers(dnsPeersTimeout, []int{0, 1, 2}, 0, 1, 2)
	})

	t.Run("two nodes with one id", func(t *testing.T) {
		// Another process with A's id, at its own address, named in DNS once it is
		// ready, as a headless Service names a pod. A and B learn its id from their
		// first anti-entropy round with it, as soon as they add it; named before it
		// listened (a slow start), that round would fail, and the next with it would
		// be a regular round, 30s x peers away.
		twin := d.add("A")
		d.node(twin).launch()
		d.node(twin).waitReady()
		d.publish(0, 1, 2, twin)
		a, b := d.node(0), d.node(1)
		eventually(t, dnsConflictTimeout, "A to report the conflict", func() error {
			st, err := a.peerStatusAt(d.peerAddr(twin))
			if err != nil {
				return err
			}
			if !strings.Contains(st.GetNodeIdConflict(), "own id") {
				return fmt.Errorf("A's view of its twin: %v", st)
			}
			return nil
		})
		eventually(t, dnsConflictTimeout, "B to report one id at two addresses", func() error {
			for _, addr := range []string{d.peerAddr(0), d.peerAddr(twin)} {
				st, err := b.peerStatusAt(addr)
				if err != nil {
					return err
				}
				if !strings.Contains(st.GetNodeIdConflict(), "also answers from") {
					all, _ := b.status()
					return fmt.Errorf("B's view of %s: %v; all: %v", addr, st, all)
				}
			}
			return nil
		})
		if v := mustMetric(t, a, "fanout_peer_node_id_conflict", `peer="`+d.peerAddr(twin)+`"`); v != 1 {
			t.Errorf("A's fanout_peer_node_id_conflict for its twin = %v, want 1", v)
		}
		if !strings.Contains(a.log(), `"level":"ERROR","msg":"node id conflict"`) {
			t.Error("A logged no ERROR line about the conflict")
		}
		resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, dnsAckTimeout, "dns/twin")
		if resp.GetSatisfied() {
			t.Errorf("ack ALL from A with a twin of A: satisfied (%v); the twin never stores A's events", resp)
		}
		d.node(twin).kill()
		d.publish(0, 1, 2)
	})
}

// peerStatusAt returns the node's status of the peer at addr.
func (n *node) peerStatusAt(addr string) (*fanoutv1.PeerStatus, error) {
	st, err := n.status()
	if err != nil {
		return nil, err
	}
	for _, p := range st.GetPeers() {
		if p.GetAddress() == addr {
			return p, nil
		}
	}
	return nil, fmt.Errorf("node %s has no peer %s", n.spec.ID, addr)
}

// waitBreakersClosed waits until n's breaker for every peer in its set is closed.
func (n *node) waitBreakersClosed(timeout time.Duration) {
	n.t.Helper()
	eventually(n.t, timeout, "node "+n.spec.ID+"'s breakers closed", func() error {
		st, err := n.status()
		if err != nil {
			return err
		}
		for _, p := range st.GetPeers() {
			if !p.GetRemoving() && p.GetBreaker() != "closed" {
				return fmt.Errorf("breaker for %s %s", p.GetAddress(), p.GetBreaker())
			}
		}
		return nil
	})
}

// hasKey returns nil once n's state table holds key.
func (n *node) hasKey(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := n.client().Get(ctx, &fanoutv1.GetRequest{TaskIds: []string{key}})
	if err != nil {
		return err
	}
	if len(resp.GetEntries()) == 0 {
		return fmt.Errorf("node %s has no %s", n.spec.ID, key)
	}
	return nil
}

// submitted is the answer of a Submit made by submitAsync.
type submitted struct {
	resp *fanoutv1.SubmitResponse
	err  error
}

// submitAsync is ackSubmit on a goroutine of its own, which cannot fail the test: the
// answer comes on the channel, within timeout plus ackSubmitMargin.
func submitAsync(c *cluster, from int, p fanoutv1.AckPolicy, timeout time.Duration, ids ...string) <-chan submitted {
	req, cli := ackRequest(p, timeout, ids...), c.client(from)
	out := make(chan submitted, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout+ackSubmitMargin)
		defer cancel()
		resp, err := cli.Submit(ctx, req)
		out <- submitted{resp, err}
	}()
	return out
}

// waitLoad waits until the background load recorded in l has had n more events
// accepted.
func waitLoad(t *testing.T, l *ledger, n int) {
	t.Helper()
	before, _ := l.count()
	eventually(t, submitTimeout, fmt.Sprintf("%d more events of the load", n), func() error {
		if got, _ := l.count(); got < before+n {
			return fmt.Errorf("%d of %d", got-before, n)
		}
		return nil
	})
}
