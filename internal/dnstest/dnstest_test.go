package dnstest

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	// answerTimeout bounds a lookup that dnsmasq must answer: generous, since on a
	// loaded machine the process may wait seconds for a core.
	answerTimeout = 10 * time.Second
	// pausedTimeout bounds the lookup of a paused server, which must time out: short,
	// since it is waited out in full.
	pausedTimeout = 500 * time.Millisecond
)

// lookup resolves name on s within timeout.
func lookup(t *testing.T, s *Server, name string, timeout time.Duration) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ips, err := s.resolver().LookupNetIP(ctx, "ip", name)
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	slices.Sort(out)
	return out, err
}

func TestServer(t *testing.T) {
	s := Start(t)
	if _, err := lookup(t, s, "a.fanout.test.", answerTimeout); !isNotFound(err) {
		t.Fatalf("before SetHosts: %v, want NXDOMAIN", err)
	}
	s.SetHosts(map[string][]string{"a.fanout.test": {"10.0.0.1", "fd00::1"}})
	if got, err := lookup(t, s, "a.fanout.test.", answerTimeout); err != nil || !slices.Equal(got, []string{"10.0.0.1", "fd00::1"}) {
		t.Fatalf("after SetHosts: %v %v", got, err)
	}
	s.SetHosts(map[string][]string{"a.fanout.test": {"10.0.0.2"}})
	if got, err := lookup(t, s, "a.fanout.test.", answerTimeout); err != nil || !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("after the second SetHosts: %v %v", got, err)
	}

	addr := s.Addr()
	s.SetSRV(map[string][]SRV{"_peer._tcp.fanout.test": {{Target: "a.fanout.test", Port: 7001}}})
	if s.Addr() != addr {
		t.Fatalf("SetSRV moved the server from %s to %s", addr, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	_, srvs, err := s.resolver().LookupSRV(ctx, "", "", "_peer._tcp.fanout.test.")
	if err != nil || len(srvs) != 1 || srvs[0].Target != "a.fanout.test." || srvs[0].Port != 7001 {
		t.Fatalf("SRV: %v %v", srvs, err)
	}
	if got, err := lookup(t, s, "a.fanout.test.", answerTimeout); err != nil || !slices.Equal(got, []string{"10.0.0.2"}) {
		t.Fatalf("the restart lost the hosts: %v %v", got, err)
	}

	s.Stop()
	s.Stop()
	_, err = lookup(t, s, "a.fanout.test.", answerTimeout)
	if err == nil || isTimeout(err) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("stopped: %v, want connection refused", err)
	}
	s.SetHosts(map[string][]string{"b.fanout.test": {"10.0.0.3"}}) // while stopped: read at Restart
	s.Restart()
	if got, err := lookup(t, s, "b.fanout.test.", answerTimeout); err != nil || !slices.Equal(got, []string{"10.0.0.3"}) {
		t.Fatalf("after Restart: %v %v", got, err)
	}

	s.Pause()
	start := time.Now()
	if _, err := lookup(t, s, "b.fanout.test.", pausedTimeout); !isTimeout(err) {
		t.Fatalf("paused: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the lookup took %v, past its %v deadline", d, pausedTimeout)
	}
	s.SetHosts(map[string][]string{"b.fanout.test": {"10.0.0.4"}}) // while paused: read at Resume
	s.Resume()
	if got, err := lookup(t, s, "b.fanout.test.", answerTimeout); err != nil || !slices.Equal(got, []string{"10.0.0.4"}) {
		t.Fatalf("after Resume: %v %v", got, err)
	}
	if log := s.Log(); !strings.Contains(log, "query[A] b.fanout.test") {
		t.Fatalf("the log lacks the queries:\n%s", log)
	}
}

// TestStopWhilePaused: cleanup kills a paused dnsmasq too.
func TestStopWhilePaused(t *testing.T) {
	s := Start(t)
	s.Pause()
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

func isTimeout(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsTimeout
}
