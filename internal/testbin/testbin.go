// Package testbin finds the external programs that tests start (dnsmasq,
// nats-server, promtool, prometheus, node). test/deps.sh installs every one of them,
// so a missing one fails the test, never skips it, and the failure says how to get it.
package testbin

import (
	"os"
	"os/exec"
	"testing"
)

// Find returns the path of the program name: on PATH, else in /usr/sbin or /sbin,
// where Debian installs daemons such as dnsmasq and nats-server and which a user's
// PATH may lack. If there is none it fails t, naming what installs it (from, e.g.
// "Debian's dnsmasq-base package").
func Find(t testing.TB, name, from string) string {
	t.Helper()
	return find(t, name, from, "/usr/sbin", "/sbin")
}

func find(t testing.TB, name, from string, sbin ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range sbin {
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s not found on PATH, in /usr/sbin or /sbin: run `bash test/deps.sh` (it installs %s), or `make test`, which does", name, from)
	return ""
}
