package e2e

import (
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
	d.waitPeers(10*time.Second, []int{0, 1, 2}, 0, 1, 2)
	if resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 5*time.Second, "dns/first"); !resp.GetSatisfied() ||
		len(resp.GetPeerAcks()) != 2 {
		t.Fatalf("ack ALL on a cluster found by DNS: %v", resp)
	}
	// Every node sends to every other before the goroutines are counted, so that each
	// has its peers' replicate streams open, as it has under the load below.
	for _, i := range []int{1, 2} {
		if resp, _ := ackSubmit(t, d.cluster, i, fanoutv1.AckPolicy_ACK_POLICY_ALL, 5*time.Second, "dns/first-"+d.node(i).spec.ID); !resp.GetSatisfied() {
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
	time.Sleep(300 * time.Millisecond)

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
		d.waitPeers(3*time.Second, []int{0, 1, 2, 3, 4}, 0, 1, 2, 3, 4)
		resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 5*time.Second, "dns/after-scale-up")
		if !resp.GetSatisfied() || len(resp.GetPeerAcks()) != 4 {
			t.Fatalf("ack ALL after scaling to 5: %v, want 4 peers acked", resp)
		}
		time.Sleep(300 * time.Millisecond) // load with 5 nodes
	})

	t.Run("scaled back to 3", func(t *testing.T) {
		for _, i := range []int{3, 4} {
			d.node(i).signal(syscall.SIGKILL) // the pods are gone; their addresses stay in DNS a moment
			d.node(i).wait(exitTimeout)
		}
		// A write that waits for every peer: D and E will never answer.
		waited := make(chan *fanoutv1.SubmitResponse, 1)
		go func() {
			resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 20*time.Second, "dns/waits-for-removed")
			waited <- resp
		}()
		time.Sleep(300 * time.Millisecond) // pending piles up for D and E
		d.publish(0, 1, 2)
		d.waitPeers(5*time.Second, []int{0, 1, 2}, 0, 1, 2)
		resp := <-waited
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
			eventually(t, 10*time.Second, "removed peers stopped on "+n.spec.ID, func() error {
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
			eventually(t, 10*time.Second, "goroutines of "+n.spec.ID+" back to their number with 2 peers", func() error {
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
		eventually(t, 15*time.Second, "the refresh interval to double twice", func() error {
			if v := mustMetric(t, n, "fanout_peers_dns_refresh_interval_seconds"); v < 4 {
				return fmt.Errorf("interval %vs", v)
			}
			return nil
		})
		if got := mustMetric(t, n, "fanout_peers_dns_lookups_total", `outcome="timeout"`); got < 2 {
			t.Errorf("%v lookups timed out, want at least 2", got)
		}
		d.waitPeers(time.Second, []int{0, 1, 2}, 0, 1, 2) // the mesh is unchanged
		if resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 5*time.Second, "dns/while-frozen"); !resp.GetSatisfied() {
			t.Errorf("ack ALL with DNS frozen: %v", resp)
		}
		before := mustMetric(t, n, "fanout_peers_dns_lookups_total", `outcome="success"`)
		d.dns.Resume()
		eventually(t, 20*time.Second, "the refresh interval to reset", func() error {
			if v := mustMetric(t, n, "fanout_peers_dns_refresh_interval_seconds"); v != 1 {
				return fmt.Errorf("interval %vs", v)
			}
			if got := mustMetric(t, n, "fanout_peers_dns_lookups_total", `outcome="success"`); got <= before {
				return fmt.Errorf("no successful lookup yet")
			}
			return nil
		})
		d.waitPeers(time.Second, []int{0, 1, 2}, 0, 1, 2)
	})

	t.Run("two nodes with one id", func(t *testing.T) {
		twin := d.add("A") // another process with A's id, at its own address
		d.publish(0, 1, 2, twin)
		d.node(twin).launch()
		d.node(twin).waitReady()
		a, b := d.node(0), d.node(1)
		eventually(t, 10*time.Second, "A to report the conflict", func() error {
			st, err := a.peerStatusAt(d.peerAddr(twin))
			if err != nil {
				return err
			}
			if !strings.Contains(st.GetNodeIdConflict(), "own id") {
				return fmt.Errorf("A's view of its twin: %v", st)
			}
			return nil
		})
		eventually(t, 10*time.Second, "B to report one id at two addresses", func() error {
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
		resp, _ := ackSubmit(t, d.cluster, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 3*time.Second, "dns/twin")
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
