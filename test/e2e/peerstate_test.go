package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// TestPeerStateLive: a peer that is stopped shows as down on the node that sends to
// it (GetStatus' row, fanout_peer_up, the readiness reason) within one failed call,
// with since when; once it is back, the first answered call makes it up again and
// its last error recovered, in each of the three.
func TestPeerStateLive(t *testing.T) {
	c := startCluster(t, specs(3, "--network-failure-retry-delay=200ms", "--breaker-open=500ms")...)
	a, cAddr := c.node(0), c.node(0).peers[2]
	submit := func(key string) {
		t.Helper()
		_, err := sendSubmit(c.client(0), &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: key, Payload: []byte("x")}}})
		must(t, err)
	}
	submit("live/1")
	if p, err := a.peerStatus(2); err != nil || !p.GetUp() {
		t.Fatalf("A's row for C before the stop: %v (%v); want up", p, err)
	}

	c.node(2).stop()
	submit("live/2")
	eventually(t, 10*time.Second, "A sees C down", func() error {
		p, err := a.peerStatus(2)
		switch {
		case err != nil:
			return err
		case p.GetUp() || p.GetUpChangedAt() == nil:
			return fmt.Errorf("up %t since %v", p.GetUp(), p.GetUpChangedAt())
		case p.GetLastError().GetRecoveredAt() != nil:
			return fmt.Errorf("its last error says recovered: %v", p.GetLastError())
		}
		return nil
	})
	if v, err := a.metric("fanout_peer_up", `peer="`+cAddr+`"`); err != nil || v != 0 {
		t.Fatalf("fanout_peer_up for C down: %v (%v), want 0", v, err)
	}
	if ok, reason, err := a.readiness(); err != nil || !ok || !strings.Contains(reason, "1 of 2 peers up; down: "+cAddr+" (for ") {
		t.Fatalf("A's readiness with C down: %t, %q (%v); want ready, naming C down now", ok, reason, err)
	}
	out := runStatusCmd(t, a.appAddr)
	if line := peerLine(out, cAddr); !strings.Contains(line, " C ") || !strings.Contains(line, " no ") || !strings.Contains(line, "network") {
		t.Fatalf("sidecar status with C down: its line %q; want C, not up, a network error", line)
	}

	c.node(2).restart()
	submit("live/3")
	eventually(t, 10*time.Second, "A sees C up again", func() error {
		p, err := a.peerStatus(2)
		switch {
		case err != nil:
			return err
		case !p.GetUp():
			return fmt.Errorf("down since %v", p.GetUpChangedAt())
		case p.GetLastError() != nil && p.GetLastError().GetRecoveredAt() == nil:
			return fmt.Errorf("its last error is not marked recovered: %v", p.GetLastError())
		}
		return nil
	})
	if v, err := a.metric("fanout_peer_up", `peer="`+cAddr+`"`); err != nil || v != 1 {
		t.Fatalf("fanout_peer_up for C back: %v (%v), want 1", v, err)
	}
	if ok, reason, err := a.readiness(); err != nil || !ok || !strings.HasPrefix(reason, "ready: 2 of 2 peers up; at start: synced with 2 of 2 peers") {
		t.Fatalf("A's readiness with C back: %t, %q (%v); want ready, 2 of 2 up", ok, reason, err)
	}
	out = runStatusCmd(t, a.appAddr)
	if line := peerLine(out, cAddr); !strings.Contains(line, " yes ") || strings.Contains(line, "network") || strings.Contains(out, "last error to "+cAddr) {
		t.Fatalf("sidecar status with C back: its line %q; want up, its recovered error left out:\n%s", line, out)
	}
}

// peerLine is the line of `sidecar status`'s table that begins with addr.
func peerLine(out, addr string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, addr+" ") {
			return line
		}
	}
	return ""
}
