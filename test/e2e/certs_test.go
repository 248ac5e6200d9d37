package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/testpki"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Peer certificates that must not be taken (issue 25): a rotation to an expired
// certificate, or to one naming another node, is refused at reload as it would be
// at start; a node whose own certificate is expired is not ready, and says why.

// refusedReloadLog is the WARN a node logs when it refuses changed peer TLS files.
const refusedReloadLog = "peer TLS files refused; keeping the certificate in use"

// expiredLeaf is a certificate for node id from a CA, expired a day ago.
func expiredLeaf(id string) testpki.Leaf {
	now := time.Now()
	return testpki.Leaf{DNSNames: []string{id + ".fanout.test"}, NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-24 * time.Hour)}
}

// TestPeerTLSReloadExpiredRefused: B's files are rotated to an expired certificate
// from the cluster's CA. B refuses them (the WARN says it expired), counts one
// failure however often it reads them again, keeps its certificate, and stays ready;
// its peers keep talking to it over old connections and new handshakes.
func TestPeerTLSReloadExpiredRefused(t *testing.T) {
	testReloadRefused(t, func(ca *testpki.CA, dir string) { testpki.Must(ca.Write(dir, expiredLeaf("B"), ca)) }, "expired at")
}

// TestPeerTLSReloadWrongNodeRefused: the same, rotated to a valid certificate of the
// same CA for another node (C): taken, B could write as C.
func TestPeerTLSReloadWrongNodeRefused(t *testing.T) {
	testReloadRefused(t, func(ca *testpki.CA, dir string) { testpki.Must(ca.Write(dir, leafFor("C"), ca)) },
		`names node C (the first label of its DNS names), not this node's id "B"`)
}

func testReloadRefused(t *testing.T, rotate func(ca *testpki.CA, dir string), want string) {
	ca, dirs, ss := tlsCluster(t, 3)
	c := startCluster(t, ss...)
	b := c.node(1)
	cv := watch(t, c)
	l := newLedger()
	notAfter := mustMetric(t, b, "fanout_peer_tls_cert_expiry_timestamp_seconds")
	reloads := mustMetric(t, b, "fanout_peer_tls_reloads_total")

	rotate(ca, dirs[1])
	eventually(t, 10*time.Second, "B refuses the rotated files", func() error {
		if got := mustMetric(t, b, "fanout_peer_tls_reload_failures_total"); got != 1 {
			return fmt.Errorf("fanout_peer_tls_reload_failures_total %v", got)
		}
		return nil
	})
	recs := logRecords(b, refusedReloadLog)
	if len(recs) != 1 || recs[0]["level"] != "WARN" || !strings.Contains(fmt.Sprint(recs[0]["err"]), want) {
		t.Errorf("B's log has %d %q lines, want one WARN saying %q: %v", len(recs), refusedReloadLog, want, recs)
	}
	if got := mustMetric(t, b, "fanout_peer_tls_cert_expiry_timestamp_seconds"); got != notAfter {
		t.Errorf("B's certificate in use expires at %v, was %v: the refused one replaced it", got, notAfter)
	}
	if got := mustMetric(t, b, "fanout_peer_tls_reloads_total"); got != reloads {
		t.Errorf("fanout_peer_tls_reloads_total %v, was %v", got, reloads)
	}
	if ok, reason, err := b.readiness(); !ok || err != nil {
		t.Errorf("B after the refused rotation: ready %t (%q, %v), want ready: its certificate in use is valid", ok, reason, err)
	}

	// Its peers keep talking to it: over the connections they have, then, with C
	// restarted, over new handshakes in both directions (B presents its kept
	// certificate, and checks C's against its kept bundle).
	for _, from := range []int{0, 1} {
		if resp, _ := ackSubmit(t, c, from, fanoutv1.AckPolicy_ACK_POLICY_ALL, 10*time.Second, fmt.Sprintf("refused/%d", from)); !resp.GetSatisfied() {
			t.Errorf("ack ALL from %s after B refused its files: %v", c.node(from).spec.ID, resp)
		}
	}
	c.node(2).kill()
	cv.restart(2)
	if resp, _ := ackSubmit(t, c, 2, fanoutv1.AckPolicy_ACK_POLICY_ALL, 10*time.Second, "refused/C"); !resp.GetSatisfied() {
		t.Errorf("ack ALL from the restarted C (new handshakes with B): %v", resp)
	}
	for i := range 3 {
		submit(t, c, i, changes("refused/"+c.node(i).spec.ID+"/", "v1", 300, 100), l)
	}
	cv.wait(convergeTimeout, l, 0, 1, 2)
	if got := mustMetric(t, b, "fanout_peer_tls_reload_failures_total"); got != 1 {
		t.Errorf("B counted %v failures for one refused rotation read again every second, want 1", got)
	}

	// A good rotation afterwards is taken.
	testpki.Must(ca.Write(dirs[1], leafFor("B"), ca))
	eventually(t, 10*time.Second, "B takes a good rotation", func() error {
		if got := mustMetric(t, b, "fanout_peer_tls_reloads_total"); got != reloads+1 {
			return fmt.Errorf("fanout_peer_tls_reloads_total %v", got)
		}
		return nil
	})
	t.Logf("B refused the rotation (%s) and kept its certificate; A, B and the restarted C acknowledged each other; B's WARN: %v", want, recs[0]["err"])
}

// TestPeerTLSExpiredAtStart: C starts with an expired certificate. It is live, but
// not ready, with the reason, however it is asked (GetStatus, /readyz, the readiness
// health service, fanout_ready); its peers refuse it, and its bootstrap waits rather
// than find every peer unreachable. A renewed certificate written to its files is
// taken, C bootstraps with both peers and turns ready, and every node converges.
func TestPeerTLSExpiredAtStart(t *testing.T) {
	ca, dirs, ss := tlsCluster(t, 3, "--anti-entropy-interval=2s", "--breaker-open=500ms", "--network-failure-retry-delay=200ms")
	testpki.Must(ca.Write(dirs[2], expiredLeaf("C"), ca))
	c := newCluster(t, ss...)
	a, b, cn := c.node(0), c.node(1), c.node(2)
	a.launch()
	b.launch()
	a.waitReady()
	b.waitReady()
	cn.launch()
	cn.waitServing("")
	// Its bootstrap waits: every peer would refuse its handshakes.
	eventually(t, readyTimeout, "C's bootstrap to wait for a valid certificate", func() error {
		if len(logRecords(cn, "bootstrap waits until this node can be ready")) == 0 {
			return fmt.Errorf("no such line in C's log yet")
		}
		return nil
	})
	const why = "expired at"
	ok, reason, err := cn.readiness()
	if err != nil || ok || !strings.Contains(reason, why) || !strings.Contains(reason, "every peer refuses it") {
		t.Errorf("C's GetStatus: ready %t, reason %q (%v); want not ready, its certificate %s", ok, reason, err, why)
	}
	if code, body := readyz(t, cn); code != http.StatusServiceUnavailable || !strings.Contains(body, why) {
		t.Errorf("C's /readyz: %d %q, want 503 saying %q", code, body, why)
	}
	if st, err := cn.healthOf(readinessService); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("C's health %q: %s (%v), want NOT_SERVING", readinessService, st, err)
	}
	if v := mustMetric(t, cn, "fanout_ready"); v != 0 {
		t.Errorf("C's fanout_ready %v, want 0", v)
	}
	if len(logRecords(cn, "peer TLS certificate unusable now; this node is not ready until a valid one is written")) != 1 {
		t.Error("C did not warn at start that its certificate is unusable")
	}
	// Its peers refuse it: A's events for C are not acknowledged.
	resp, _ := ackSubmit(t, c, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 2*time.Second, "expired/k")
	if ack := peerAck(t, c, 0, 2, resp); ack.GetState() == fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED {
		t.Errorf("C, with an expired certificate, acknowledged A's event: %v", ack)
	}
	p, err := a.peerStatus(2)
	if err != nil {
		t.Fatal(err)
	}
	if msg := p.GetLastError().GetMessage(); !strings.Contains(msg, "certificate has expired") {
		t.Errorf("A's last error with C: %q, want its handshake refused for C's expired certificate", msg)
	}
	t.Logf("C with an expired certificate: not ready (%q); A's view of C: %v", reason, p.GetLastError())

	// Renewed: taken, then the bootstrap runs (with both peers), and C is ready.
	testpki.Must(ca.Write(dirs[2], leafFor("C"), ca))
	took := cn.waitServing(readinessService)
	if ok, reason, err := cn.readiness(); !ok || err != nil || !strings.Contains(reason, "synced with 2 of 2 peers") {
		t.Errorf("C after the renewal: ready %t, %q (%v); want ready, synced with 2 of 2 peers", ok, reason, err)
	}
	if got := mustMetric(t, cn, "fanout_peer_tls_reloads_total"); got != 1 {
		t.Errorf("C's fanout_peer_tls_reloads_total %v after the renewal, want 1", got)
	}
	cv := watch(t, c)
	l := newLedger()
	for i := range 3 {
		submit(t, c, i, changes("expired/"+c.node(i).spec.ID+"/", "v1", 300, 100), l)
	}
	cv.wait(convergeTimeout, l, 0, 1, 2)
	if got := getEntry(t, c, 2, "expired/k"); got == nil {
		t.Error("C never got the event A accepted while C's certificate was expired")
	}
	t.Logf("C ready %s after its start, once its certificate was renewed", ms(took))
}

// TestPeerTLSExpiresWhileRunning: C's certificate is rotated to one that expires a
// few seconds later. C takes it (it is valid then), and when it expires C turns not
// ready with the reason, however it is asked; a renewed certificate makes it ready
// again, and every node converges.
func TestPeerTLSExpiresWhileRunning(t *testing.T) {
	ca, dirs, ss := tlsCluster(t, 3, "--anti-entropy-interval=2s", "--breaker-open=500ms", "--network-failure-retry-delay=200ms")
	c := startCluster(t, ss...)
	cn := c.node(2)
	cv := watch(t, c)
	l := newLedger()
	// Certificates count in whole seconds; 8s leaves the reload (every second) time
	// to take it while it is still valid, on a busy machine too.
	notAfter := time.Now().Add(8 * time.Second).Truncate(time.Second)
	testpki.Must(ca.Write(dirs[2], testpki.Leaf{DNSNames: []string{"C.fanout.test"}, NotAfter: notAfter}, ca))
	eventually(t, 10*time.Second, "C takes the short-lived certificate", func() error {
		if got := mustMetric(t, cn, "fanout_peer_tls_cert_expiry_timestamp_seconds"); got != float64(notAfter.Unix()) {
			return fmt.Errorf("fanout_peer_tls_cert_expiry_timestamp_seconds %v, want %d", got, notAfter.Unix())
		}
		return nil
	})
	if ok, reason, err := cn.readiness(); !ok || err != nil {
		t.Fatalf("C before its certificate expires: ready %t, %q (%v)", ok, reason, err)
	}
	<-time.After(time.Until(notAfter)) // the fault: the certificate's expiry
	eventually(t, readyTimeout, "C's readiness service NOT_SERVING once its certificate expired", func() error {
		if st, err := cn.healthOf(readinessService); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
			return fmt.Errorf("health %s (%v)", st, err)
		}
		return nil
	})
	notReadyAfter := time.Since(notAfter)
	ok, reason, err := cn.readiness()
	if err != nil || ok || !strings.Contains(reason, "expired at") {
		t.Errorf("C's GetStatus after its certificate expired: ready %t, %q (%v)", ok, reason, err)
	}
	if code, body := readyz(t, cn); code != http.StatusServiceUnavailable || !strings.Contains(body, "expired at") {
		t.Errorf("C's /readyz: %d %q, want 503 saying its certificate expired", code, body)
	}
	if v := mustMetric(t, cn, "fanout_ready"); v != 0 {
		t.Errorf("C's fanout_ready %v, want 0", v)
	}
	if recs := logRecords(cn, "not ready"); len(recs) != 1 || recs[0]["level"] != "WARN" || !strings.Contains(fmt.Sprint(recs[0]["reason"]), "expired at") {
		t.Errorf("C's log: %v; want one WARN \"not ready\" saying its certificate expired", recs)
	}

	testpki.Must(ca.Write(dirs[2], leafFor("C"), ca))
	renewed := time.Now()
	cn.waitServing(readinessService)
	readyIn := time.Since(renewed)
	for i := range 3 {
		submit(t, c, i, changes("expiring/"+c.node(i).spec.ID+"/", "v1", 300, 100), l)
	}
	cv.wait(convergeTimeout, l, 0, 1, 2)
	t.Logf("C not ready %s after its certificate expired (%q); ready again %s after the renewal was written",
		ms(notReadyAfter), reason, ms(readyIn))
}

// readyz returns the status code and body of n's /readyz.
func readyz(t *testing.T, n *node) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.adminAddr+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("node %s /readyz: %v", n.spec.ID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		t.Fatalf("node %s /readyz: %v", n.spec.ID, err)
	}
	return resp.StatusCode, string(body)
}
