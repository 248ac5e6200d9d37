package discovery

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Target
	}{
		{"fanout-peers:7000", Target{Name: "fanout-peers", Port: 7000}},
		{"fanout-peers.default.svc.cluster.local:7000", Target{Name: "fanout-peers.default.svc.cluster.local", Port: 7000}},
		{"peers.fanout.test.:1", Target{Name: "peers.fanout.test.", Port: 1}},
		{"_peer._tcp.fanout-peers.default.svc.cluster.local", Target{Name: "_peer._tcp.fanout-peers.default.svc.cluster.local", SRV: true}},
		{"_peer._tcp.fanout.test.", Target{Name: "_peer._tcp.fanout.test.", SRV: true}},
		{"Peers-1.Example:65535", Target{Name: "Peers-1.Example", Port: 65535}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("Parse = %+v, %v; want %+v", got, err, tc.want)
			}
			if got.String() != tc.in {
				t.Fatalf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		in   string
		hint string // a part of the error that says what to do
	}{
		{"", "give name:port"},
		{"fanout-peers", "no port: give name:port, e.g. fanout-peers:7000"},
		{"fanout-peers:", "port \"\""},
		{"fanout-peers:0", "1..65535"},
		{"fanout-peers:65536", "1..65535"},
		{"fanout-peers:+7000", "1..65535"},
		{"fanout-peers:http", "1..65535"},
		{"10.0.0.1:7000", "list fixed peers with --peers instead"},
		{"[fd00::1]:7000", "list fixed peers with --peers instead"},
		{"fd00::1", "give name:port"},
		{"_peer._tcp.fanout.test:7000", "takes no port, its records carry the ports: drop \":7000\""},
		{"peers..test:7000", "empty label"},
		{".peers.test:7000", "empty label"},
		{":7000", "no DNS name"},
		{"peers.test/x:7000", "a DNS name has letters, digits"},
		{"dns:///peers.test:7000", "give name:port"},
		{strings.Repeat("a", 64) + ".test:7000", "DNS allows 63"},
		{strings.Repeat("abcdefg.", 32) + "test:7000", "DNS allows 253"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", got)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "--peers-dns ") || !strings.Contains(msg, tc.hint) {
				t.Fatalf("error %q: want it to start with --peers-dns and say %q", msg, tc.hint)
			}
		})
	}
}

func TestParseServer(t *testing.T) {
	for in, want := range map[string]string{
		"10.96.0.10":      "10.96.0.10:53",
		"10.96.0.10:5353": "10.96.0.10:5353",
		"fd00::a":         "[fd00::a]:53",
		"[fd00::a]:53":    "[fd00::a]:53",
	} {
		if got, err := ParseServer(in); err != nil || got != want {
			t.Errorf("ParseServer(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "kube-dns:53", "10.96.0.10:0", "10.96.0.10:x", "10.96.0.10:"} {
		if _, err := ParseServer(in); err == nil || !strings.Contains(err.Error(), "is not an IP address") {
			t.Errorf("ParseServer(%q) = %v, want an error saying what to give", in, err)
		}
	}
}
