package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/testpki"
	"github.com/fanout/fanout/pkg/peertls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tlsCluster makes a CA and a certificate for each node (DNS name <id>.fanout.test,
// so the node id is its first label), and specs whose nodes use them.
func tlsCluster(t *testing.T, n int, flags ...string) (*testpki.CA, []string, []nodeSpec) {
	t.Helper()
	ca := testpki.Must(testpki.NewCA("fanout test CA"))
	ss := specs(n, flags...)
	dirs := make([]string, n)
	for i := range ss {
		dirs[i] = filepath.Join(t.TempDir(), ss[i].ID)
		if err := os.MkdirAll(dirs[i], 0o700); err != nil {
			t.Fatal(err)
		}
		f := testpki.Must(ca.Write(dirs[i], leafFor(ss[i].ID), ca))
		ss[i].Flags = append(ss[i].Flags, "--peer-tls-cert="+f.Cert, "--peer-tls-key="+f.Key, "--peer-tls-ca="+f.CA)
	}
	return ca, dirs, ss
}

func leafFor(id string) testpki.Leaf { return testpki.Leaf{DNSNames: []string{id + ".fanout.test"}} }

// peerClient dials addr's peer listener with creds.
func peerClient(t *testing.T, addr string, creds credentials.TransportCredentials) fanoutv1.PeerServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return fanoutv1.NewPeerServiceClient(cc)
}

// forge is a Replicate as origin of one far-future event of key: the attack of
// issue 12 that, if taken, would win last-writer-wins forever.
func forge(origin, key string) *fanoutv1.ReplicateRequest {
	return &fanoutv1.ReplicateRequest{OriginNode: origin, Events: []*fanoutv1.Event{{TaskId: key, Version: 1 << 62, Payload: []byte("forged")}}}
}

// TestPeerMutualTLS: a cluster on mutual TLS replicates; the peer port refuses a
// client with no certificate, one from another CA, an expired one, plaintext, and a
// valid peer writing as another origin; none of them changes a key.
func TestPeerMutualTLS(t *testing.T) {
	ca, _, ss := tlsCluster(t, 3)
	c := startCluster(t, ss...)
	if resp, _ := ackSubmit(t, c, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 5*time.Second, "tls/a"); !resp.GetSatisfied() {
		t.Fatalf("ack ALL over mutual TLS: %v", resp)
	}
	b := c.node(1)

	other := testpki.Must(testpki.NewCA("another CA"))
	dir := t.TempDir()
	keyPair := func(ca *testpki.CA, l testpki.Leaf) tls.Certificate {
		certPEM, keyPEM := testpki.Must2(ca.Issue(l))
		kp, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	// The attackers trust any server, so that B's own check is what is tested.
	trustAny := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: certs})
	}
	expired := keyPair(ca, testpki.Leaf{DNSNames: []string{"A.fanout.test"}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	for _, a := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"plaintext", insecure.NewCredentials()},
		{"TLS without a client certificate", trustAny()},
		{"a certificate from another CA", trustAny(keyPair(other, leafFor("A")))},
		{"an expired certificate from the CA", trustAny(expired)},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := peerClient(t, b.peerAddr, a.creds).Replicate(ctx, forge("A", "tls/a"))
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: Replicate answered %v; want the handshake refused (UNAVAILABLE)", a.name, err)
		}
		t.Logf("%s: %v", a.name, err)
	}

	// C's own, valid certificate, writing as A.
	fc := testpki.Must(ca.Write(dir, leafFor("C"), ca))
	src, err := peertls.Open(peertls.Config{Files: peertls.Files(fc)})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	asC := peerClient(t, b.peerAddr, src.ClientCredentials())
	if _, err := asC.Replicate(ctx, forge("A", "tls/a")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("C writing as A: %v, want PERMISSION_DENIED", err)
	}
	if resp, err := asC.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "C",
		Events: []*fanoutv1.Event{{TaskId: "tls/c", Version: 7}}}); err != nil || resp.GetStatuses()[0] != fanoutv1.ItemStatus_ITEM_STATUS_OK {
		t.Errorf("C writing as itself: %v, %v", resp, err)
	}
	if got := mustMetric(t, b, "fanout_peer_calls_refused_total", `reason="origin"`); got != 1 {
		t.Errorf("B counted %v refused origins, want 1", got)
	}
	for i := range 3 {
		got := getEntry(t, c, i, "tls/a")
		if got.GetOriginNode() != "A" || string(got.GetEvent().GetPayload()) == "forged" {
			t.Errorf("node %s holds tls/a as %v after the attacks", c.node(i).spec.ID, got)
		}
	}
}

// TestPeerCertificateRotation rotates every node's certificate and CA bundle to a new
// CA (both CAs trusted, then certificates from the new one, then the old CA dropped)
// without a restart, while A and B submit all along; then C restarts on the new
// files, so A and B reach it over new handshakes. Every node converges on every
// write, no subscriber sees a key go backwards, and a certificate of the old CA is
// refused.
func TestPeerCertificateRotation(t *testing.T) {
	oldCA, dirs, ss := tlsCluster(t, 3)
	c := startCluster(t, ss...)
	newCA := testpki.Must(testpki.NewCA("new CA"))
	cv := watch(t, c)
	l := newLedger()

	// The load: A and B each update 50 keys of their own, 10 per request, every 20ms.
	stopLoad := backgroundLoad(t, c, []int{0, 1}, "rotation/", 50, 10, l)

	rotate := func(step string, signer *testpki.CA, bundle ...*testpki.CA) {
		t.Helper()
		before := make([]float64, 3)
		for i := range 3 {
			before[i] = mustMetric(t, c.node(i), "fanout_peer_tls_reloads_total")
			testpki.Must(signer.Write(dirs[i], leafFor(c.node(i).spec.ID), bundle...))
		}
		for i := range 3 {
			eventually(t, 10*time.Second, fmt.Sprintf("%s: node %s reloads", step, c.node(i).spec.ID), func() error {
				if got := mustMetric(t, c.node(i), "fanout_peer_tls_reloads_total"); got <= before[i] {
					return fmt.Errorf("reloads %v", got)
				}
				return nil
			})
		}
		if resp, _ := ackSubmit(t, c, 0, fanoutv1.AckPolicy_ACK_POLICY_ALL, 5*time.Second, "rotation/"+strings.ReplaceAll(step, " ", "-")); !resp.GetSatisfied() {
			t.Fatalf("%s: ack ALL unsatisfied: %v", step, resp)
		}
	}
	rotate("both CAs trusted", oldCA, oldCA, newCA)
	rotate("certificates from the new CA", newCA, oldCA, newCA)
	rotate("old CA dropped", newCA, newCA)

	// New handshakes: C restarts, and A and B reconnect to it with the new files.
	c.node(2).kill()
	cv.restart(2)
	time.Sleep(200 * time.Millisecond) // some load after C is back
	stopLoad()
	cv.wait(convergeTimeout, l, 0, 1, 2)
	events, tasks := l.count()
	t.Logf("%d events on %d keys from A and B during the rotation: every node holds every winner", events, tasks)
	for i := range 3 {
		if got := mustMetric(t, c.node(i), "fanout_peer_tls_reload_failures_total"); got != 0 {
			t.Errorf("node %s found unusable files %v times", c.node(i).spec.ID, got)
		}
	}

	// A certificate of the old CA no longer gets in.
	oldDir := t.TempDir()
	src, err := peertls.Open(peertls.Config{Files: peertls.Files(testpki.Must(oldCA.Write(oldDir, leafFor("A"), oldCA, newCA)))})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := peerClient(t, c.node(1).peerAddr, src.ClientCredentials()).Replicate(ctx, forge("A", "rotation/old")); status.Code(err) != codes.Unavailable {
		t.Errorf("a certificate of the dropped CA: %v, want the handshake refused", err)
	}
}

// TestPeerTLSNodeIDMismatch: a node whose certificate names another node refuses to
// start, and says what to do.
func TestPeerTLSNodeIDMismatch(t *testing.T) {
	ca := testpki.Must(testpki.NewCA("ca"))
	f := testpki.Must(ca.Write(t.TempDir(), leafFor("someone-else"), ca))
	out, err := runSidecar(t, "serve", "--node-id=A", "--app-addr=127.0.0.1:0", "--peer-addr=127.0.0.1:0", "--admin-addr=",
		"--peer-tls-cert="+f.Cert, "--peer-tls-key="+f.Key, "--peer-tls-ca="+f.CA)
	if err == nil || !strings.Contains(out, `names node someone-else`) || !strings.Contains(out, `--node-id someone-else`) {
		t.Fatalf("serve with a certificate for another node: %v\n%s", err, out)
	}
	out, err = runSidecar(t, "serve", "--node-id=A", "--app-addr=127.0.0.1:0", "--peer-addr=127.0.0.1:0", "--admin-addr=",
		"--peer-tls-cert="+f.Cert)
	if err == nil || !strings.Contains(out, "key, ca not given") {
		t.Fatalf("serve with only --peer-tls-cert: %v\n%s", err, out)
	}
}

// getEntry returns node i's entry of key (nil if it has none).
func getEntry(t *testing.T, c *cluster, i int, key string) *fanoutv1.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.client(i).Get(ctx, &fanoutv1.GetRequest{TaskIds: []string{key}})
	if err != nil {
		t.Fatalf("Get %s on node %s: %v", key, c.node(i).spec.ID, err)
	}
	for _, e := range resp.GetEntries() {
		if e.GetEvent().GetTaskId() == key {
			return e
		}
	}
	return nil
}

// runSidecar runs the sidecar binary with args to its exit (at most 20s) and returns
// its combined output.
func runSidecar(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sidecarBin, args...)
	cmd.Env = (&node{}).env() // without the test's FANOUT_* variables
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAppToken: with --app-token-file, the app listener takes calls only with the
// file's token, a rotated token replaces the old one without a restart, and the
// health service stays open for probes.
func TestAppToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, nodeSpec{ID: "A", Flags: []string{"--app-token-file=" + path}}) // ready: health is open
	a := c.node(0)
	submit := func(token string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		_, err := a.client().Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "token/k"}}})
		return err
	}
	if err := submit("first-token"); err != nil {
		t.Fatalf("Submit with the token: %v", err)
	}
	for name, tok := range map[string]string{"no token": "", "a wrong token": "first-tokeN"} {
		if err := submit(tok); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Submit with %s: %v, want UNAUTHENTICATED", name, err)
		}
	}
	if err := os.WriteFile(path, []byte("second-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the rotated token to work", func() error { return submit("second-token") })
	if err := submit("first-token"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the old token after rotation: %v, want UNAUTHENTICATED", err)
	}
	if !strings.Contains(a.log(), "app token reloaded") {
		t.Error("the log does not say the token was reloaded")
	}
}

// TestAppListenerExposure: an app listener other hosts can reach, without a token,
// is loud at startup; a unix socket gets --app-socket-mode.
func TestAppListenerExposure(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "app.sock")
	c := newCluster(t, specs(2)...)
	_, port, _ := strings.Cut(c.node(0).appAddr, ":")
	c.node(0).appAddr = "0.0.0.0:" + port
	c.node(1).appAddr = "unix://" + sock
	c.node(1).setFlag("--app-socket-mode", "0660")
	c.start()
	if !strings.Contains(c.node(0).log(), "app listener is reachable from other hosts and takes no token") {
		t.Errorf("A listens on 0.0.0.0 without a token and does not warn:\n%s", c.node(0).log())
	}
	if strings.Contains(c.node(1).log(), "app listener is reachable") {
		t.Error("B on a unix socket warns about exposure")
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("socket mode %v, want 0660", fi.Mode().Perm())
	}
}
