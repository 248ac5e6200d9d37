package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/dnstest"
	"github.com/fanout/fanout/pkg/refresh"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// answerTimeout is the Config.Timeout of a Resolver whose lookups dnsmasq must
// answer: generous, since on a loaded machine dnsmasq may wait seconds for a core.
const answerTimeout = 10 * time.Second

// newResolver returns a Resolver that asks only s, with timeout.
func newResolver(t *testing.T, s *dnstest.Server, timeout time.Duration) *Resolver {
	t.Helper()
	r, err := NewResolver(Config{Server: s.Addr(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func lookup(t *testing.T, r *Resolver, target string) ([]string, error) {
	t.Helper()
	tg, err := Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	return r.Lookup(context.Background(), tg)
}

func TestLookup(t *testing.T) {
	s := dnstest.Start(t)
	s.SetHosts(map[string][]string{
		"peers.fanout.test": {"10.0.0.10", "fd00::1", "10.0.0.2", "::ffff:10.0.0.3"},
		"a.fanout.test":     {"10.0.0.1"},
		"b.fanout.test":     {"10.0.0.2", "fd00::2"},
		"other.fanout.test": {"10.0.0.99"},
	})
	s.SetSRV(map[string][]dnstest.SRV{
		"_peer._tcp.fanout.test": {
			{Target: "b.fanout.test", Port: 7002},
			{Target: "a.fanout.test", Port: 7001, Priority: 10, Weight: 5}, // priority and weight mean nothing here
			{Target: "a.fanout.test", Port: 7001},                          // the same peer twice
			{Target: "a.fanout.test", Port: 7011},                          // a second port on one host
			{Target: "gone.fanout.test", Port: 7003},                       // a target without addresses is left out
		},
		"_empty._tcp.fanout.test": {{Target: "gone.fanout.test", Port: 7003}},
	})
	r := newResolver(t, s, answerTimeout)
	for _, tc := range []struct {
		target string
		want   []string
	}{
		// Sorted by address, IPv4 first, numerically: 10.0.0.2 before 10.0.0.10.
		{"peers.fanout.test:7000", []string{"10.0.0.2:7000", "10.0.0.3:7000", "10.0.0.10:7000", "[fd00::1]:7000"}},
		{"peers.fanout.test.:7000", []string{"10.0.0.2:7000", "10.0.0.3:7000", "10.0.0.10:7000", "[fd00::1]:7000"}},
		{"a.fanout.test:1", []string{"10.0.0.1:1"}},
		{"_peer._tcp.fanout.test", []string{"10.0.0.1:7001", "10.0.0.1:7011", "10.0.0.2:7002", "[fd00::2]:7002"}},
		{"_peer._tcp.fanout.test.", []string{"10.0.0.1:7001", "10.0.0.1:7011", "10.0.0.2:7002", "[fd00::2]:7002"}},
	} {
		t.Run(tc.target, func(t *testing.T) {
			got, err := lookup(t, r, tc.target)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("Lookup = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, target := range []string{"nxdomain.fanout.test:7000", "_nxdomain._tcp.fanout.test", "_empty._tcp.fanout.test"} {
		t.Run(target, func(t *testing.T) {
			got, err := lookup(t, r, target)
			if !errors.Is(err, ErrNoRecords) || errors.Is(err, ErrTimeout) || refresh.IsTimeout(err) || got != nil {
				t.Fatalf("Lookup = %q, %v; want ErrNoRecords", got, err)
			}
			if !strings.Contains(err.Error(), strings.TrimSuffix(target, ":7000")) {
				t.Fatalf("error %q does not name the target", err)
			}
		})
	}
}

func TestLookupSeesChanges(t *testing.T) {
	s := dnstest.Start(t)
	r := newResolver(t, s, answerTimeout)
	for _, ips := range [][]string{{"10.0.0.1"}, {"10.0.0.1", "10.0.0.2"}, {"10.0.0.2"}} {
		s.SetHosts(map[string][]string{"peers.fanout.test": ips})
		got, err := lookup(t, r, "peers.fanout.test:7000")
		var want []string
		for _, ip := range ips {
			want = append(want, ip+":7000")
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("after SetHosts(%v): %q, %v", ips, got, err)
		}
	}
	s.SetSRV(map[string][]dnstest.SRV{"_peer._tcp.fanout.test": {{Target: "peers.fanout.test", Port: 7005}}})
	if got, err := lookup(t, r, "_peer._tcp.fanout.test"); err != nil || !slices.Equal(got, []string{"10.0.0.2:7005"}) {
		t.Fatalf("after SetSRV: %q, %v", got, err)
	}
}

// TestLookupTCP: 200 A records do not fit the 1232-byte UDP answer that Go's
// resolver asks for (EDNS0), so dnsmasq truncates it and Go asks again over TCP.
func TestLookupTCP(t *testing.T) {
	s := dnstest.Start(t)
	var ips, want []string
	for i := range 200 {
		ip := fmt.Sprintf("10.0.%d.%d", i/100, i%100+1)
		ips = append(ips, ip)
		want = append(want, ip+":7000")
	}
	s.SetHosts(map[string][]string{"peers.fanout.test": ips})
	r := newResolver(t, s, answerTimeout)
	var tcp atomic.Int32
	dial := dialer(s.Addr())
	r.r.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		if network == "tcp" {
			tcp.Add(1)
		}
		return dial(ctx, network, address)
	}
	got, err := lookup(t, r, "peers.fanout.test:7000")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Lookup = %d addresses, %v; want 200", len(got), err)
	}
	if tcp.Load() == 0 {
		t.Fatal("no query went over TCP")
	}
}

// TestLookupTimeout: a paused dnsmasq keeps its socket and never answers, so the
// lookup times out, within Config.Timeout, not resolv.conf's 5s per query.
func TestLookupTimeout(t *testing.T) {
	s := dnstest.Start(t)
	s.SetHosts(map[string][]string{"peers.fanout.test": {"10.0.0.1"}})
	s.SetSRV(map[string][]dnstest.SRV{"_peer._tcp.fanout.test": {{Target: "peers.fanout.test", Port: 7001}}})
	const timeout = 300 * time.Millisecond
	r := newResolver(t, s, timeout)
	s.Pause()
	for _, target := range []string{"peers.fanout.test:7000", "_peer._tcp.fanout.test"} {
		t.Run(target, func(t *testing.T) {
			start := time.Now()
			got, err := lookup(t, r, target)
			checkTimeout(t, got, err, start, timeout)
			if !strings.Contains(err.Error(), s.Addr()) {
				t.Fatalf("error %q does not name the server %s", err, s.Addr())
			}
		})
	}
	t.Run("a shorter context deadline", func(t *testing.T) {
		r := newResolver(t, s, time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		got, err := r.Lookup(ctx, Target{Name: "peers.fanout.test", Port: 7000})
		checkTimeout(t, got, err, start, timeout)
	})
	s.Resume()
	if got, err := lookup(t, r, "peers.fanout.test:7000"); err != nil || !slices.Equal(got, []string{"10.0.0.1:7000"}) {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
}

// TestLookupTimeoutBlackhole: the same against a UDP socket that never answers.
func TestLookupTimeoutBlackhole(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	const timeout = 300 * time.Millisecond
	r, err := NewResolver(Config{Server: pc.LocalAddr().String(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := r.Lookup(context.Background(), Target{Name: "peers.fanout.test", Port: 7000})
	checkTimeout(t, got, err, start, timeout)
}

func checkTimeout(t *testing.T, got []string, err error, start time.Time, timeout time.Duration) {
	t.Helper()
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoRecords) || !refresh.IsTimeout(err) || got != nil {
		t.Fatalf("Lookup = %q, %v; want ErrTimeout", got, err)
	}
	// The upper bound only catches a timeout that is not honoured (resolv.conf's 5s
	// per query): it is far above the timeout, for a loaded machine.
	if took < timeout || took > timeout+3*time.Second {
		t.Fatalf("Lookup took %v, want about %v", took, timeout)
	}
}

// TestLookupRefused: a stopped server refuses UDP at once (ICMP port unreachable):
// a quick error, neither a timeout nor an empty answer, so the refresh neither backs
// off nor removes peers.
func TestLookupRefused(t *testing.T) {
	s := dnstest.Start(t)
	r := newResolver(t, s, 5*time.Second)
	s.Stop()
	start := time.Now()
	got, err := lookup(t, r, "peers.fanout.test:7000")
	if err == nil || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoRecords) || refresh.IsTimeout(err) || got != nil {
		t.Fatalf("Lookup = %q, %v; want an error other than ErrTimeout and ErrNoRecords", got, err)
	}
	if !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), s.Addr()) {
		t.Fatalf("error %q: want connection refused by %s", err, s.Addr())
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("Lookup took %v: a refused connection should fail fast", took)
	}
}

func TestLookupCancelled(t *testing.T) {
	s := dnstest.Start(t)
	s.SetHosts(map[string][]string{"peers.fanout.test": {"10.0.0.1"}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newResolver(t, s, time.Second).Lookup(ctx, Target{Name: "peers.fanout.test", Port: 7000})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrNoRecords) {
		t.Fatalf("Lookup = %v, want context.Canceled", err)
	}
}

func TestNewResolverRefuses(t *testing.T) {
	for _, cfg := range []Config{
		{Timeout: 0},
		{Server: "kube-dns:53", Timeout: time.Second},
	} {
		if _, err := NewResolver(cfg); err == nil {
			t.Errorf("NewResolver(%+v) accepted it", cfg)
		}
	}
	if _, err := NewResolver(DefaultConfig()); err != nil {
		t.Errorf("NewResolver(DefaultConfig()): %v", err)
	}
	r, _ := NewResolver(DefaultConfig())
	if _, err := r.Lookup(context.Background(), Target{Name: "x", Port: 0}); err == nil {
		t.Error("Lookup accepted port 0")
	}
}
