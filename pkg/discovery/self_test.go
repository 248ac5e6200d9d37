package discovery

import (
	"net/netip"
	"testing"
)

func TestIsSelf(t *testing.T) {
	local := func() []netip.Addr {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::3")}
	}
	for _, tc := range []struct {
		addr, listen string
		want         bool
	}{
		{"10.1.2.3:7000", ":7000", true},
		{"10.1.2.3:7000", "0.0.0.0:7000", true},
		{"10.1.2.3:7000", "[::]:7000", true},
		{"[fd00::3]:7000", ":7000", true},
		{"127.0.0.1:7000", ":7000", true},
		{"10.1.2.3:7000", "pod-0.peers:7000", true}, // a name: the interfaces decide
		{"10.1.2.4:7000", ":7000", false},           // another pod
		{"10.1.2.3:7001", ":7000", false},           // another process on this host
		{"10.1.2.3:7000", ":07000", true},
		{"10.1.2.3:7000", "10.1.2.3:7000", true},
		{"10.1.2.3:7000", "127.0.0.1:7000", false}, // bound to loopback only
		{"127.0.0.1:7001", "127.0.0.1:7000", false},
		{"[::ffff:10.1.2.3]:7000", "10.1.2.3:7000", true},
		{"10.9.9.9:7000", "10.9.9.9:7000", true}, // an advertised address need not be local
		{"10.1.2.3", ":7000", false},
		{"10.1.2.3:7000", "7000", false},
		{"peers.test:7000", ":7000", false},
	} {
		if got := isSelf(tc.addr, tc.listen, local); got != tc.want {
			t.Errorf("isSelf(%q, %q) = %v, want %v", tc.addr, tc.listen, got, tc.want)
		}
	}
}

// TestIsSelfInterfaces: loopback is an interface address of every host.
func TestIsSelfInterfaces(t *testing.T) {
	if !IsSelf("127.0.0.1:7000", ":7000") {
		t.Fatal("IsSelf(127.0.0.1:7000, :7000) = false")
	}
	if IsSelf("192.0.2.1:7000", ":7000") { // TEST-NET-1: no host has it
		t.Fatal("IsSelf(192.0.2.1:7000, :7000) = true")
	}
}
