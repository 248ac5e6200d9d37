// Package dnstest runs a real DNS server, dnsmasq, for tests: the unit tests of
// pkg/discovery and the end-to-end tests of test/e2e point a resolver at it and
// change its records while they run.
//
// # The server
//
// Start launches dnsmasq as a child process on 127.0.0.1 and a port reserved with
// internal/freeport, answering UDP and TCP (a resolver falls back to TCP when an
// answer does not fit a UDP packet). It serves only what the test gives it: A and
// AAAA records from a hosts file (SetHosts), SRV records from its configuration file
// (SetSRV), and NXDOMAIN for every other name (--local=/#/). It reads neither
// /etc/hosts, /etc/resolv.conf nor /etc/dnsmasq.conf, and forwards nothing.
//
// dnsmasq re-reads its hosts files on SIGHUP, but not its configuration: SetHosts
// rewrites the hosts file and sends SIGHUP, while SetSRV rewrites the configuration
// and restarts the process on the same port. Either returns once dnsmasq answers
// with the new records: the hosts file carries a marker name per generation,
// g<N>.dnstest.invalid, which the helper resolves until it answers.
//
// Stop kills the process (UDP queries to the port are then refused at once, a
// quick error, not a timeout); Pause stops it with SIGSTOP, so queries go
// unanswered and resolvers time out, until Resume. The process is killed in the
// test's cleanup, and, on Linux, when the test process dies. Its log (every query
// and answer, --log-queries) is printed when the test fails.
//
// Every method must be called from the test's goroutine: a failure ends the test.
package dnstest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/internal/testbin"
)

const (
	// readyTimeout bounds how long Start, SetHosts, SetSRV, Restart and Resume wait
	// for dnsmasq to answer with the current records.
	readyTimeout = 10 * time.Second
	// pollInterval is the wait between two readiness queries.
	pollInterval = 10 * time.Millisecond
	// listenIP is where dnsmasq listens: freeport reserves ports on it.
	listenIP = "127.0.0.1"
)

// SRV is one SRV record: the Target host (which SetHosts should resolve) and Port,
// with RFC 2782's Priority and Weight.
type SRV struct {
	Target                 string
	Port, Priority, Weight int
}

// Server is one dnsmasq process and the files it reads.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	hosts map[string][]string // as last given to SetHosts
	srv   map[string][]SRV    // as last given to SetSRV
	gen   int                 // bumped at every write of the hosts file

	cmd    *exec.Cmd     // nil when stopped
	exited chan struct{} // closed when cmd has exited
	paused bool
}

// Start launches dnsmasq with no records, and waits until it answers.
func Start(t testing.TB) *Server {
	t.Helper()
	ports, err := freeport.Take(1)
	if err != nil {
		t.Fatalf("dnstest: %v", err)
	}
	t.Cleanup(ports.Release) // after the process is killed: cleanups run last-first
	s := &Server{t: t, bin: testbin.Find(t, "dnsmasq", "Debian's dnsmasq-base package"), dir: t.TempDir(), port: ports.Ports()[0]}
	t.Cleanup(s.cleanup)
	s.writeHosts()
	s.writeConf()
	s.launch()
	s.waitServing()
	return s
}

// Addr is the server's host:port, for a resolver or --dns-server.
func (s *Server) Addr() string { return net.JoinHostPort(listenIP, strconv.Itoa(s.port)) }

// SetHosts replaces the A and AAAA records: each name resolves to its IPs (IPv4 and
// IPv6 alike); a name left out resolves to nothing (NXDOMAIN). It returns once
// dnsmasq serves them, or at once if the server is stopped or paused (Restart or
// Resume waits then).
func (s *Server) SetHosts(hosts map[string][]string) {
	s.t.Helper()
	s.hosts = make(map[string][]string, len(hosts))
	for name, ips := range hosts {
		for _, ip := range ips {
			if _, err := netip.ParseAddr(ip); err != nil {
				s.t.Fatalf("dnstest: SetHosts: %s: %v", name, err)
			}
		}
		s.hosts[name] = slices.Clone(ips)
	}
	s.writeHosts()
	if s.cmd == nil {
		return
	}
	// A paused process gets the signal when it continues.
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		s.t.Fatalf("dnstest: SIGHUP: %v", err)
	}
	if !s.paused {
		s.waitServing()
	}
}

// SetSRV replaces the SRV records, keyed by owner name ("_peer._tcp.fanout.test").
// dnsmasq reads them only at start, so a running server is restarted on the same
// port: it is down for a moment.
func (s *Server) SetSRV(records map[string][]SRV) {
	s.t.Helper()
	s.srv = make(map[string][]SRV, len(records))
	for name, rr := range records {
		s.srv[name] = slices.Clone(rr)
	}
	s.writeConf()
	if s.cmd != nil {
		s.Restart()
	}
}

// Stop kills dnsmasq and waits for it to exit. Queries get "connection refused"
// until Restart. It is idempotent.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill() // works on a SIGSTOPped process too
	<-s.exited
	s.cmd, s.exited, s.paused = nil, nil, false
}

// Restart stops dnsmasq if it runs and starts it again on the same port, with the
// current records, and waits until it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.launch()
	s.waitServing()
}

// Pause stops the process with SIGSTOP: it keeps its sockets, and queries wait in
// them unanswered, so resolvers time out. Resume undoes it.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
	s.paused = true
}

// Resume continues a paused process and waits until it answers with the current
// records. The queries that waited are answered then, to resolvers that have long
// given up.
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
	s.paused = false
	s.waitServing()
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("dnstest: %v: dnsmasq is stopped", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("dnstest: %v: %v", sig, err)
	}
}

// Log returns dnsmasq's log so far: one line per query and per answer, across
// restarts.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath())
	return string(b)
}

func (s *Server) hostsPath() string { return filepath.Join(s.dir, "hosts") }
func (s *Server) confPath() string  { return filepath.Join(s.dir, "dnsmasq.conf") }
func (s *Server) logPath() string   { return filepath.Join(s.dir, "dnsmasq.log") }

// marker is the name that resolves only once dnsmasq has read generation gen of the
// hosts file.
func marker(gen int) string { return fmt.Sprintf("g%d.dnstest.invalid.", gen) }

// writeHosts writes the hosts file: s.hosts and the marker of a new generation.
func (s *Server) writeHosts() {
	s.t.Helper()
	s.gen++
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", listenIP, strings.TrimSuffix(marker(s.gen), "."))
	for _, name := range slices.Sorted(maps.Keys(s.hosts)) {
		for _, ip := range s.hosts[name] {
			fmt.Fprintf(&b, "%s %s\n", ip, name)
		}
	}
	s.write(s.hostsPath(), b.String())
}

// writeConf writes the configuration file: the SRV records. Everything else is on the
// command line, where a reader of the log's exec line sees it.
func (s *Server) writeConf() {
	s.t.Helper()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(s.srv)) {
		for _, r := range s.srv[name] {
			fmt.Fprintf(&b, "srv-host=%s,%s,%d,%d,%d\n", name, r.Target, r.Port, r.Priority, r.Weight)
		}
	}
	s.write(s.confPath(), b.String())
}

// write replaces path's content atomically, so that dnsmasq never reads half a file.
func (s *Server) write(path, content string) {
	s.t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		s.t.Fatalf("dnstest: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		s.t.Fatalf("dnstest: %v", err)
	}
}

// args is dnsmasq's command line.
func (s *Server) args() []string {
	return []string{
		// Stay in the foreground and keep our uid (as root, --keep-in-foreground would
		// switch to the dnsmasq user, who cannot read t.TempDir()); answer TCP in this
		// process rather than in forked children.
		"--no-daemon",
		"--log-facility=-", // log to stderr, our log file, not syslog
		"--log-queries=extra",
		"--conf-file=" + s.confPath(), // instead of /etc/dnsmasq.conf
		"--no-resolv",                 // no upstream servers from /etc/resolv.conf
		"--no-hosts",                  // not /etc/hosts
		"--no-poll",
		"--addn-hosts=" + s.hostsPath(),
		"--local=/#/", // NXDOMAIN for every name not ours, not REFUSED
		"--listen-address=" + listenIP,
		"--bind-interfaces", // bind 127.0.0.1:port only, not the wildcard address
		"--port=" + strconv.Itoa(s.port),
		"--pid-file=", // none
	}
}

// launch starts dnsmasq without waiting for it to answer; its output is appended to
// the log file.
func (s *Server) launch() {
	s.t.Helper()
	f, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("dnstest: %v", err)
	}
	defer f.Close() // the child has its own descriptor
	fmt.Fprintf(f, "==== %s exec %s %s\n", time.Now().Format(time.RFC3339Nano), s.bin, strings.Join(s.args(), " "))
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = testbin.ProcAttr()
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("dnstest: start dnsmasq: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // the exit status is read from cmd.ProcessState
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
}

// waitServing waits until dnsmasq answers the current generation's marker. It fails
// the test if dnsmasq exits first or readyTimeout passes.
func (s *Server) waitServing() {
	s.t.Helper()
	r := s.resolver()
	want := marker(s.gen)
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := r.LookupNetIP(ctx, "ip4", want)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("dnstest: dnsmasq does not answer %s after %v: %v\n%s", want, readyTimeout, err, s.Log())
		}
		select {
		case <-s.exited:
			s.t.Fatalf("dnstest: dnsmasq exited (%v) before it answered:\n%s", s.cmd.ProcessState, s.Log())
		case <-tick.C:
		}
	}
}

// resolver is Go's resolver, asking this server only.
func (s *Server) resolver() *net.Resolver {
	addr := s.Addr()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Go's resolver bounds a query by a deadline on the conn, not by ctx: close it
		// when ctx ends, so no query outlives the lookup that gave up on it.
		context.AfterFunc(ctx, func() { c.Close() })
		return c, nil
	}}
}

// cleanup kills the process and, if the test failed, prints the log.
func (s *Server) cleanup() {
	s.Stop()
	if s.t.Failed() {
		s.t.Logf("---- dnsmasq log (%s) ----\n%s", s.logPath(), s.Log())
	}
}
