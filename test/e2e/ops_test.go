package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestGetStatus submits to A and checks that A's GetStatus lists both peers under
// their node ids with counters that match the load, and that `sidecar status` prints
// them.
func TestGetStatus(t *testing.T) {
	c := startCluster(t, nodeSpec{ID: "node-alpha"}, nodeSpec{ID: "node-bravo"}, nodeSpec{ID: "node-charlie"})
	recB, recC := subscribe(t, c, 1, ""), subscribe(t, c, 2, "")
	exp := newExpectations()
	submit(t, c, 0, updates("status/", 200, 1, 20), exp) // unique tasks: nothing coalesces
	waitLatest(t, convergeTimeout, exp.snapshot(), recB, recC)

	const events = 200
	for _, peer := range []int{1, 2} {
		want := c.node(peer).spec.ID
		eventually(t, convergeTimeout, "A's status of peer "+want, func() error {
			p, err := c.node(0).peerStatus(peer)
			if err != nil {
				return err
			}
			switch {
			case p.GetNodeId() != want:
				return fmt.Errorf("node_id %q, want %q", p.GetNodeId(), want)
			case p.GetAccepted() != events || p.GetSucceeded() != events:
				return fmt.Errorf("accepted %d, succeeded %d, want %d each", p.GetAccepted(), p.GetSucceeded(), events)
			case p.GetPending() != 0 || p.GetInFlight() != 0:
				return fmt.Errorf("pending %d, in flight %d, want 0", p.GetPending(), p.GetInFlight())
			case p.GetBreaker() != "closed":
				return fmt.Errorf("breaker %q, want closed", p.GetBreaker())
			case p.GetOverridden()+p.GetOverflow()+p.GetExpired()+p.GetPermanent()+p.GetStale() != 0:
				return fmt.Errorf("unexpected drops: %v", p)
			}
			return nil
		})
	}
	st, err := c.node(0).status()
	if err != nil {
		t.Fatal(err)
	}
	if st.GetNodeId() != "node-alpha" || len(st.GetPeers()) != 2 {
		t.Errorf("GetStatus: node_id %q with %d peers, want node-alpha with 2", st.GetNodeId(), len(st.GetPeers()))
	}

	out := runStatusCmd(t, c.node(0).appAddr)
	for _, peer := range []int{1, 2} {
		line := lineWith(out, c.node(peer).peerAddr)
		if !strings.Contains(line, c.node(peer).spec.ID) || !strings.Contains(line, fmt.Sprint(events)) {
			t.Errorf("sidecar status: line of peer %s is %q, want its node id and %d", c.node(peer).peerAddr, line, events)
		}
	}
	if !strings.Contains(out, "node-alpha") {
		t.Errorf("sidecar status does not name the node:\n%s", out)
	}
}

// runStatusCmd runs `sidecar status --addr addr` and returns its stdout.
func runStatusCmd(t *testing.T, addr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, sidecarBin, "status", "--addr", addr)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sidecar status --addr %s: %v\nstderr: %s", addr, err, stderr.String())
	}
	t.Logf("sidecar status:\n%s", stdout.String())
	return stdout.String()
}

func lineWith(text, substr string) string {
	for line := range strings.Lines(text) {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}

// TestShutdown checks the graceful stop: on SIGTERM or SIGINT the sidecar refuses new
// submissions, keeps sending until its queues are empty or --shutdown-timeout passes,
// and exits 0.
func TestShutdown(t *testing.T) {
	t.Run("idle node exits 0", func(t *testing.T) {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			t.Run(sig.String(), func(t *testing.T) {
				c := startCluster(t, specs(2)...)
				a := c.node(0)
				a.signal(sig)
				checkExit(t, a, exitTimeout)
				if !strings.Contains(a.log(), `"msg":"sidecar stopped"`) {
					t.Errorf("A's log has no \"sidecar stopped\"")
				}
			})
		}
	})
	t.Run("drains queued events to a reachable peer", testDrainsBeforeExit)
	t.Run("gives up on an unreachable peer after shutdown-timeout", testShutdownTimeout)
}

// testDrainsBeforeExit freezes B so that A's queue for it is certainly not empty,
// sends SIGTERM to A, and resumes B: A refuses new submissions, then delivers
// everything to B, and exits 0.
func testDrainsBeforeExit(t *testing.T) {
	c := startCluster(t, specs(2)...)
	a, b := c.node(0), c.node(1)
	recB := subscribe(t, c, 1, "")
	b.signal(syscall.SIGSTOP)
	exp := newExpectations()
	submit(t, c, 0, updates("drain/", 2000, 1, 200), exp)
	p, err := a.peerStatus(1)
	if err != nil {
		t.Fatal(err)
	}
	queued := p.GetAcceptorQueue() + p.GetPending() + p.GetInFlight()
	if queued == 0 {
		t.Fatalf("A's queue for frozen B is empty: %v", p)
	}

	a.signal(syscall.SIGTERM)
	eventually(t, exitTimeout, "A's health NOT_SERVING while draining", func() error {
		if st, err := a.health(); st != healthpb.HealthCheckResponse_NOT_SERVING {
			return fmt.Errorf("health %s, %v", st, err)
		}
		return nil
	})
	_, err = c.client(0).Submit(context.Background(), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "drain/late"}}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Submit while draining: %v, want UNAVAILABLE", err)
	}

	b.signal(syscall.SIGCONT)
	checkExit(t, a, 10*time.Second+exitTimeout) // the default --shutdown-timeout
	waitLatest(t, convergeTimeout, exp.snapshot(), recB)
	if !strings.Contains(a.log(), "drained: every queued event was sent") {
		t.Errorf("A's log does not report a complete drain")
	}
	t.Logf("%d events were queued for B at SIGTERM; B received all %d", queued, exp.count())
}

// testShutdownTimeout kills B, queues events for it at A, and checks that A exits 0
// once --shutdown-timeout has passed, not before and not much later, and that its log
// counts the unsent events: dropped without --data-dir; kept with it, and then sent
// to B by anti-entropy once both are back (nothing is dropped at all).
func testShutdownTimeout(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("data-dir=%v", durable), func(t *testing.T) {
			const timeout = time.Second
			ss := specs(2, "--anti-entropy-interval=1s")
			ss[0].Flags = append(ss[0].Flags, "--shutdown-timeout="+timeout.String())
			if durable {
				ss[0].Flags = append(ss[0].Flags, "--data-dir="+t.TempDir())
			}
			c := startCluster(t, ss...)
			a, b := c.node(0), c.node(1)
			b.kill()
			exp := newExpectations()
			submit(t, c, 0, updates("unreachable/", 10, 1, 10), exp)

			start := time.Now()
			a.signal(syscall.SIGTERM)
			checkExit(t, a, timeout+exitTimeout)
			took := time.Since(start)
			t.Logf("exited %s after SIGTERM with --shutdown-timeout=%s", took.Round(time.Millisecond), timeout)
			if took < timeout {
				t.Errorf("exited after %s, before --shutdown-timeout=%s with events queued for B", took, timeout)
			}
			want := `"msg":"drain ended with events unsent: they are dropped (no --data-dir); a peer gets them only from a node that has them","sent":0,"kept":0,"dropped":10,`
			if durable {
				want = `"msg":"drain ended with events unsent: they are kept in the data dir, and anti-entropy sends them after the restart","sent":0,"kept":10,"dropped":0,`
			}
			if !strings.Contains(a.log(), want) {
				t.Fatalf("A's log does not count the unsent events; want a line with\n%s", want)
			}
			if !durable {
				return
			}
			b.restart()
			a.restart()
			kept := exp.snapshot()
			ids := slices.Collect(maps.Keys(kept))
			eventually(t, convergeTimeout, "B holds A's kept events after A came back from its data dir", func() error {
				got, err := getIDs(b, ids)
				if err == nil {
					err = diffState(b.spec.ID, got, kept, false)
				}
				return err
			})
		})
	}
}

// checkExit waits up to timeout for n to exit and fails the test unless it exits 0.
func checkExit(t *testing.T, n *node, timeout time.Duration) {
	t.Helper()
	st, err := n.wait(timeout)
	if err != nil {
		t.Fatal(err)
	}
	n.closeConn()
	if st.ExitCode() != 0 {
		t.Errorf("node %s: %s, want exit status 0", n.spec.ID, st)
	}
}

// TestEnvVars checks that every flag is also read from FANOUT_<FLAG>, and that the
// command line wins over the environment.
func TestEnvVars(t *testing.T) {
	cases := []struct {
		name   string
		spec   nodeSpec
		wantID string
		// maxPayload, if set, is the largest payload the node must accept.
		maxPayload int
	}{
		{name: "FANOUT_NODE_ID", spec: nodeSpec{Env: []string{"FANOUT_NODE_ID=from-env"}}, wantID: "from-env"},
		{name: "--node-id wins over FANOUT_NODE_ID", spec: nodeSpec{ID: "from-flag", Env: []string{"FANOUT_NODE_ID=from-env"}}, wantID: "from-flag"},
		{name: "FANOUT_MAX_EVENT_BYTES", spec: nodeSpec{ID: "x", Env: []string{"FANOUT_MAX_EVENT_BYTES=100"}}, wantID: "x", maxPayload: 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, tc.spec)
			st, err := c.node(0).status()
			if err != nil {
				t.Fatal(err)
			}
			if st.GetNodeId() != tc.wantID {
				t.Errorf("node_id %q, want %q", st.GetNodeId(), tc.wantID)
			}
			if tc.maxPayload > 0 {
				checkMaxPayload(t, c.client(0), tc.maxPayload)
			}
		})
	}
}

func checkMaxPayload(t *testing.T, cli fanoutv1.FanoutServiceClient, max int) {
	t.Helper()
	for _, size := range []int{max, max + 1} {
		err := sendUnary(cli, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "env/x", Payload: make([]byte, size)}}})
		switch {
		case size <= max && err != nil:
			t.Errorf("payload of %d bytes: %v, want accepted", size, err)
		case size > max && status.Code(err) != codes.InvalidArgument:
			t.Errorf("payload of %d bytes: %v, want INVALID_ARGUMENT", size, err)
		}
	}
}

// TestUnresolvablePeer points a node at a peer whose host name does not resolve and
// checks that the reason is visible: GetStatus gives the peer's last error (class
// network, saying the name does not resolve), and the log has a WARN line with it.
func TestUnresolvablePeer(t *testing.T) {
	const peer = "no-such-peer.invalid:7071"
	c := startCluster(t, nodeSpec{ID: "A", Flags: []string{"--peers=" + peer}})
	a := c.node(0)
	submit(t, c, 0, updates("unresolvable/", 1, 1, 1), newExpectations())
	var last *fanoutv1.PeerError
	eventually(t, convergeTimeout, "A's last error for "+peer, func() error {
		st, err := a.status()
		if err != nil {
			return err
		}
		if len(st.GetPeers()) != 1 || st.GetPeers()[0].GetLastError() == nil {
			return fmt.Errorf("peers %v: no last error yet", st.GetPeers())
		}
		last = st.GetPeers()[0].GetLastError()
		return nil
	})
	// gRPC's DNS resolver says "name resolver error: produced zero addresses"; the Go
	// resolver, "no such host".
	if msg := last.GetMessage(); last.GetClass() != "network" || !(strings.Contains(msg, "resolver") || strings.Contains(msg, "no such host")) {
		t.Fatalf("last error %v; want class network and a message saying the name does not resolve", last)
	}
	if !strings.Contains(a.log(), `"msg":"replicate to peer failed","peer":"`+peer+`"`) {
		t.Error("A's log has no WARN line for the failing peer")
	}
	t.Logf("A's last error for %s: %s: %s", peer, last.GetClass(), last.GetMessage())
}
