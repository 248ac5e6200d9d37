package discovery

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParse: any --peers-dns value is refused with an error naming the flag, or
// parsed into a target that prints back to a value parsing to the same target.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"fanout-peers:7071", "fanout-peers.default.svc.cluster.local.:7071", "_peer._tcp.fanout-peers",
		"_peer._tcp.x:7071", "10.0.0.1:7071", "[::1]:7071", "name:+7", "name:0", "name:65536", "", ":", "a..b:1", "é:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tgt, err := Parse(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--peers-dns ") {
				t.Fatalf("Parse(%q) error %q does not name the flag", s, err)
			}
			return
		}
		if tgt.Name == "" || (!tgt.SRV && (tgt.Port < 1 || tgt.Port > 65535)) || (tgt.SRV && tgt.Port != 0) {
			t.Fatalf("Parse(%q) = %+v: an invalid target", s, tgt)
		}
		back, err := Parse(tgt.String())
		if err != nil || back != tgt {
			t.Fatalf("Parse(%q) = %+v, which prints as %q and parses to %+v, %v", s, tgt, tgt.String(), back, err)
		}
	})
}

// FuzzParseServer: a --dns-server value is refused, or gives an ip:port with a port.
func FuzzParseServer(f *testing.F) {
	for _, s := range []string{"10.96.0.10", "10.96.0.10:53", "[fd00::a]:53", "fd00::a", "kube-dns:53", "1.2.3.4:0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseServer(s)
		if err != nil {
			return
		}
		ap, perr := netip.ParseAddrPort(got)
		if perr != nil || ap.Port() == 0 {
			t.Fatalf("ParseServer(%q) = %q, not an ip:port with a port", s, got)
		}
	})
}
