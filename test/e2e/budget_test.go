package e2e

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// One memory budget per node (issue 25, item 2): --max-pending-bytes bounds the
// events pending for all peers together, and --max-peers the peers DNS may name.
// Before it, a name answering 300 addresses (297 dead) took one node from 50 MiB to
// 873 MiB RSS after 9,000 events, and it stayed there after DNS went back to 3.
//
// RSS is read from /proc/<pid>/status (node.memory): VmHWM, the peak, for the bound,
// and VmRSS, the current, for what is returned.

const (
	// budgetMemoryLimit is the --memory-limit of the node under test: a pod limited
	// to 128 MiB. Its --max-pending-bytes is then a quarter of it, 32 MiB.
	budgetMemoryLimit = 128 << 20
	// budgetRSSBound is the safety bound on the node's peak RSS: 1.5x its memory
	// limit. Without the budget the test's pending events alone would take over a GiB.
	budgetRSSBound = budgetMemoryLimit * 3 / 2
	// bulkEvents of bulkPayload bytes each are submitted to the node under test, in
	// requests of bulkBatch.
	bulkEvents, bulkBatch, bulkPayload = 30000, 500, 100
	// budgetSettle bounds the waits for a node's queues and peer set to follow a
	// change (peers leaving after --peer-removal-grace, memory returned).
	budgetSettle = 60 * time.Second
)

// bulk is n events of distinct tasks prefix00000…, each with a payload of
// bulkPayload bytes, in requests of batch.
func bulk(prefix string, n, batch int) [][]*fanoutv1.Event {
	reqs := changes(prefix, "", n, batch)
	for _, events := range reqs {
		for _, ev := range events {
			ev.Payload = append(ev.Payload, strings.Repeat("x", bulkPayload-len(ev.Payload))...)
		}
	}
	return reqs
}

// deadAddrs returns n loopback addresses on port that nothing listens on:
// 127.0.<2+i/250>.<1+i%250>, away from the nodes' 127.0.0.x.
func deadAddrs(n int, port string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = net.JoinHostPort(deadIP(i), port)
	}
	return out
}

func deadIP(i int) string { return fmt.Sprintf("127.0.%d.%d", 2+i/250, 1+i%250) }

// checkBudget checks the node's pending bytes against its budget, and its peak RSS
// against budgetRSSBound, and returns the budget's figures for the log. filled: the
// node was sent enough for its dead peers to fill the budget, so it evicted.
func checkBudget(t *testing.T, n *node, filled bool) string {
	t.Helper()
	used := mustMetric(t, n, "fanout_pending_bytes")
	limit := mustMetric(t, n, "fanout_pending_bytes_limit")
	evicted := mustMetric(t, n, "fanout_pending_budget_evicted_events_total")
	if limit != budgetMemoryLimit/4 {
		t.Errorf("node %s: --max-pending-bytes %v, want a quarter of --memory-limit, %d", n.spec.ID, limit, budgetMemoryLimit/4)
	}
	// A batcher over its share sheds at its next step: between two steps the budget
	// may be over by what was granted meanwhile, which the scrape can catch.
	if used > 2*limit {
		t.Errorf("node %s: %v bytes pending, over twice the budget %v", n.spec.ID, used, limit)
	}
	if filled && evicted == 0 {
		t.Errorf("node %s evicted nothing for the budget; its dead peers should have filled it", n.spec.ID)
	}
	rss, peak, err := n.memory()
	if err != nil {
		t.Fatal(err)
	}
	if peak > budgetRSSBound {
		t.Errorf("node %s: peak RSS %d MiB, over 1.5x its memory limit (%d MiB)", n.spec.ID, peak>>20, budgetRSSBound>>20)
	}
	return fmt.Sprintf("pending %.1f MiB of %.0f MiB, %v events evicted for the budget, RSS %d MiB (peak %d MiB, bound %d MiB)",
		used/(1<<20), limit/(1<<20), evicted, rss>>20, peak>>20, budgetRSSBound>>20)
}

// TestPendingBudgetStaticDeadPeers: node A, limited to 128 MiB, has its two live
// peers and 120 static peers nothing answers at, and is sent 30,000 events of 100
// bytes. The dead peers' queues would hold 3.6 million events; the budget keeps them
// to half of 32 MiB, A's RSS stays within 1.5x its limit, and B and C get every
// event.
func TestPendingBudgetStaticDeadPeers(t *testing.T) {
	ss := specs(3, "--network-failure-retry-delay=100ms")
	ss[0].Flags = append(ss[0].Flags, fmt.Sprintf("--memory-limit=%dMiB", budgetMemoryLimit>>20))
	c := newCluster(t, ss...)
	_, port, _ := net.SplitHostPort(c.node(0).peerAddr)
	for i, a := range deadAddrs(120, port) {
		c.node(0).peers[3+i] = a
	}
	c.start()
	cv := watch(t, c)
	l := newLedger()
	if err := submitAll(c.client(0), "A", bulk("budget/static/", bulkEvents, bulkBatch), l); err != nil {
		t.Fatal(err)
	}
	cv.wait(convergeTimeout, l, 0, 1, 2)
	summary := checkBudget(t, c.node(0), true)
	if st, err := c.node(0).status(); err != nil || len(st.GetPeers()) != 122 {
		t.Fatalf("A's peers: %d (%v), want 122", len(st.GetPeers()), err)
	}
	t.Logf("A with 2 live and 120 dead static peers after %d events of %d bytes: %s", bulkEvents, bulkPayload, summary)
}

// TestPendingBudgetDNSDeadPeers: three nodes found by DNS, limited to 128 MiB each;
// under load the name answers 300 addresses, 297 of them dead, and node A is sent
// 30,000 events of 100 bytes besides. Each node's pending stays within its budget and
// its RSS within 1.5x its limit, the live nodes get every event, and when DNS goes
// back to the three the dead peers' events and memory are returned.
func TestPendingBudgetDNSDeadPeers(t *testing.T) {
	d := newDNSCluster(t, "--peers-refresh=1s", "--peer-removal-grace=2s", "--network-failure-retry-delay=100ms",
		"--max-peers=300", fmt.Sprintf("--memory-limit=%dMiB", budgetMemoryLimit>>20))
	for _, id := range []string{"A", "B", "C"} {
		d.add(id)
	}
	d.publish(0, 1, 2)
	d.start()
	d.waitPeers(10*time.Second, []int{0, 1, 2}, 0, 1, 2)
	cv := watch(t, d.cluster)
	l := newLedger()
	stopLoad := backgroundLoad(t, d.cluster, []int{0, 1, 2}, "budget/dns/", 40, 5, l)

	ips := []string{d.ip(0), d.ip(1), d.ip(2)}
	for i := range 297 {
		ips = append(ips, deadIP(i))
	}
	d.dns.SetHosts(map[string][]string{d.name: ips})
	for i := range 3 {
		n := d.node(i)
		eventually(t, budgetSettle, "node "+n.spec.ID+" to take the 299 other addresses as peers", func() error {
			st, err := n.status()
			if err == nil && len(st.GetPeers()) != 299 {
				err = fmt.Errorf("%d peers", len(st.GetPeers()))
			}
			return err
		})
	}
	if err := submitAll(d.client(0), "A", bulk("budget/dns/bulk/", bulkEvents, bulkBatch), l); err != nil {
		t.Fatal(err)
	}
	stopLoad()
	cv.wait(convergeTimeout, l, 0, 1, 2)
	before := make([]int64, 3)
	for i := range 3 {
		t.Logf("node %s with 297 dead peers: %s", d.node(i).spec.ID, checkBudget(t, d.node(i), i == 0))
		before[i], _, _ = d.node(i).memory()
	}

	t.Run("DNS back to the three nodes", func(t *testing.T) {
		stopLoad := backgroundLoad(t, d.cluster, []int{0, 1, 2}, "budget/dns/after/", 40, 5, l)
		d.publish(0, 1, 2)
		fell := make([]int64, 3) // the RSS once it fell
		for i := range 3 {
			n := d.node(i)
			eventually(t, budgetSettle, "node "+n.spec.ID+" to drop the dead peers and their events", func() error {
				st, err := n.status()
				if err != nil {
					return err
				}
				if len(st.GetPeers()) != 2 {
					return fmt.Errorf("%d peers", len(st.GetPeers()))
				}
				// The live peers' queues hold what the load just sent, a few events.
				if used := mustMetric(t, n, "fanout_pending_bytes"); used > 1<<20 {
					return fmt.Errorf("%v bytes pending", used)
				}
				return nil
			})
			eventually(t, budgetSettle, "node "+n.spec.ID+"'s RSS to fall by 16 MiB", func() error {
				// By at least what the dead peers' queues held at most, half the
				// budget; their goroutines and connections go too.
				rss, _, err := n.memory()
				if err == nil && rss > before[i]-budgetMemoryLimit/8 {
					err = fmt.Errorf("RSS %d MiB, %d MiB with the dead peers", rss>>20, before[i]>>20)
				}
				fell[i] = rss
				return err
			})
		}
		stopLoad()
		cv.wait(convergeTimeout, l, 0, 1, 2)
		for i := range 3 {
			t.Logf("node %s: RSS %d MiB with 297 dead peers, %d MiB once they left", d.node(i).spec.ID, before[i]>>20, fell[i]>>20)
		}
	})
}

// TestMaxPeersDNS: a name that answers more addresses than --max-peers; each node
// takes its live peers (already in its set) and fills the cap with the first of the
// others, refuses the rest with a WARN, and counts them; the live nodes still
// converge.
func TestMaxPeersDNS(t *testing.T) {
	const maxPeers, dead = 10, 20
	d := newDNSCluster(t, "--peers-refresh=1s", "--network-failure-retry-delay=100ms", fmt.Sprintf("--max-peers=%d", maxPeers))
	for _, id := range []string{"A", "B", "C"} {
		d.add(id)
	}
	d.publish(0, 1, 2)
	d.start()
	d.waitPeers(10*time.Second, []int{0, 1, 2}, 0, 1, 2)
	ips := []string{d.ip(0), d.ip(1), d.ip(2)}
	for i := range dead {
		ips = append(ips, deadIP(i))
	}
	d.dns.SetHosts(map[string][]string{d.name: ips})
	cv := watch(t, d.cluster)
	l := newLedger()
	for i := range 3 {
		n := d.node(i)
		eventually(t, 10*time.Second, "node "+n.spec.ID+" to refuse the addresses past --max-peers", func() error {
			if v := mustMetric(t, n, "fanout_peers_dns_refused_addresses"); v != 2+dead-maxPeers {
				return fmt.Errorf("%v refused", v)
			}
			return nil
		})
		peers, err := d.peerSet(i)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for j := range 3 {
			if j != i {
				want = append(want, d.peerAddr(j))
			}
		}
		for j := range maxPeers - 2 {
			want = append(want, net.JoinHostPort(deadIP(j), d.peerPort))
		}
		slices.Sort(want)
		if !slices.Equal(peers, want) {
			t.Errorf("node %s's peers %v, want its live peers and the first %d dead addresses %v", n.spec.ID, peers, maxPeers-2, want)
		}
		if !strings.Contains(n.log(), `"level":"WARN","msg":"DNS names more peers than --max-peers`) {
			t.Errorf("node %s logged no WARN about the refused addresses", n.spec.ID)
		}
	}
	if err := submitAll(d.client(0), "A", changes("maxpeers/", "v1", 200, 50), l); err != nil {
		t.Fatal(err)
	}
	cv.wait(convergeTimeout, l, 0, 1, 2)
}
