package natstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/testbin"
)

const (
	// portsPerServer are the client, route, monitoring and advertised route ports.
	portsPerServer = 4
	// firstHost is the last byte of server 0's loopback address, 127.0.0.21.
	firstHost = 21
	// clusterName is the cluster every server joins.
	clusterName = "natstest"
	// logTailLines is how much of each server's log a failed test prints.
	logTailLines = 80
	// maxMemStore and maxFileStore bound JetStream's storage per server, instead of
	// the server's defaults (75% of the machine's memory; most of the disk), which
	// every server of every test would claim on a shared machine.
	maxMemStore  = "256MB"
	maxFileStore = "2GB"
)

// host returns server i's loopback address: distinct per server, so that the servers
// look like hosts in logs and in JetStream's peer lists. Linux routes all of
// 127.0.0.0/8 to the loopback interface.
func host(i int) string { return "127.0.0." + strconv.Itoa(firstHost+i) }

func hostPort(h string, port int) string { return net.JoinHostPort(h, strconv.Itoa(port)) }

// server is one nats-server: its ports, its directory (configuration, store, log) and
// its process while it runs.
type server struct {
	index int
	name  string // server_name: "n0", …
	bin   string
	dir   string // holds nats.conf, store/ and nats.log; kept across restarts
	// The ports are fixed for the server's life, so that a restart is the same server.
	clientPort, routePort, httpPort, advertisePort int

	cmd    *exec.Cmd     // nil while not running
	exited chan struct{} // closed when cmd has exited; nil while not running
}

func newServer(i int, bin, dir string, ports []int) *server {
	return &server{
		index: i, name: "n" + strconv.Itoa(i), bin: bin, dir: dir,
		clientPort: ports[0], routePort: ports[1], httpPort: ports[2], advertisePort: ports[3],
	}
}

func (s *server) host() string      { return host(s.index) }
func (s *server) clientURL() string { return "nats://" + hostPort(s.host(), s.clientPort) }
func (s *server) httpURL() string   { return "http://" + hostPort(s.host(), s.httpPort) }
func (s *server) confPath() string  { return filepath.Join(s.dir, "nats.conf") }
func (s *server) logPath() string   { return filepath.Join(s.dir, "nats.log") }
func (s *server) running() bool     { return s.cmd != nil }

// writeConfig writes the configuration file. routes are the links to the other
// servers (none: no cluster); op is operator mode's (nil: none).
//
// The cluster advertises advertisePort, where nothing listens: a server that learns
// of another through gossip, before its own route through the link is up, dials the
// advertised address once, is refused, and gives up (an implicit route is not
// retried). So every route is one of the configured ones, through a link, and
// Partition cuts them all.
func (s *server) writeConfig(t testing.TB, routes []string, op *operator) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\n", s.name)
	fmt.Fprintf(&b, "listen: %q\n", hostPort(s.host(), s.clientPort))
	fmt.Fprintf(&b, "http: %q\n", hostPort(s.host(), s.httpPort))
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  max_memory_store: %s\n  max_file_store: %s\n}\n",
		filepath.Join(s.dir, "store"), maxMemStore, maxFileStore)
	if op != nil {
		b.WriteString(op.config())
	}
	if len(routes) > 0 {
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: %q\n  advertise: %q\n  routes: [\n",
			clusterName, hostPort(s.host(), s.routePort), hostPort(s.host(), s.advertisePort))
		for _, r := range routes {
			fmt.Fprintf(&b, "    %q\n", r)
		}
		b.WriteString("  ]\n}\n")
	}
	if err := os.WriteFile(s.confPath(), []byte(b.String()), 0o644); err != nil {
		t.Fatalf("natstest: %v", err)
	}
}

// launch starts the process without waiting for it to answer; its output is
// appended to the log file.
func (s *server) launch(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	defer f.Close() // the child has its own descriptor
	args := []string{"-c", s.confPath()}
	fmt.Fprintf(f, "==== %s exec %s %s\n", time.Now().Format(time.RFC3339Nano), s.bin, strings.Join(args, " "))
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = testbin.ProcAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("natstest: start %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // the exit status is read from cmd.ProcessState
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
}

// kill sends SIGKILL and waits for the exit. It is idempotent.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill() //nolint:errcheck // fails only if it has exited already
	<-s.exited
	s.cmd, s.exited = nil, nil
}

// stop sends SIGTERM and waits up to timeout for the exit, then kills. It is
// idempotent.
func (s *server) stop(t testing.TB, timeout time.Duration) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // fails only if it has exited already
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-s.exited:
		s.cmd, s.exited = nil, nil
	case <-timer.C:
		s.kill()
		t.Fatalf("natstest: %s did not stop within %v of SIGTERM: killed", s.name, timeout)
	}
}

// log returns the log file's content.
func (s *server) log() string {
	b, _ := os.ReadFile(s.logPath())
	return string(b)
}

// tail returns the last n lines of text.
func tail(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
