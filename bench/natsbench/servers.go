package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// server is one spawned nats-server. A goroutine reads its log (stderr) for the
// ports it listens on and the routes it has made.
type server struct {
	id       string
	cmd      *exec.Cmd
	profPort int           // its --profile port (net/http/pprof), 0 without
	done     chan struct{} // closed when the log has been read to the end and cmd waited for

	mu         sync.Mutex
	clientPort int
	routePort  int
	routes     int
	log        []string // the last lines, to explain a failed start
	changed    chan struct{}
}

var (
	clientRe = regexp.MustCompile(`Listening for client connections on [^ ]*:(\d+)`)
	routeRe  = regexp.MustCompile(`Listening for route connections on [^ ]*:(\d+)`)
)

// startServers starts n nats-server processes of bin on loopback, on ports the
// kernel picks. With n >= 2 they form a cluster: server 0 is the seed every other one
// routes to, and NATS's gossip completes the full mesh. It returns once every server
// listens for clients and has a route to every other one.
//
// With storeDir set the servers run JetStream, each storing under storeDir/<id>, and
// it also waits until the cluster has a JetStream meta leader (an account info request
// on server 0 is answered). With profile each server also serves net/http/pprof on a
// port of its own (nats-server --profile), for forced collections.
func startServers(ctx context.Context, bin string, n int, storeDir string, timeout time.Duration, profile bool) ([]*server, error) {
	var servers []*server
	fail := func(err error) ([]*server, error) {
		stopServers(servers, 5*time.Second)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var routePorts []int
	if n >= 2 && storeDir != "" {
		var err error
		if routePorts, err = freePorts(n); err != nil {
			return nil, err
		}
	}
	var profPorts []int
	if profile {
		var err error
		if profPorts, err = freePorts(n); err != nil {
			return nil, err
		}
	}
	for i := range n {
		args := []string{"-a", "127.0.0.1", "-p", "-1", "-n", fmt.Sprintf("bench-%d", i)}
		if profile {
			args = append(args, "--profile", strconv.Itoa(profPorts[i]))
		}
		if storeDir != "" {
			args = append(args, "-js", "-sd", filepath.Join(storeDir, fmt.Sprintf("bench-%d", i)))
		}
		switch {
		case n >= 2 && storeDir != "":
			// A JetStream cluster needs routes configured on every server, the seed too.
			args = append(args, "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i]), "--cluster_name", "bench",
				"--routes", routesBut(routePorts, i))
		case n >= 2:
			args = append(args, "--cluster", "nats://127.0.0.1:-1", "--cluster_name", "bench")
			if i > 0 {
				args = append(args, "--routes", fmt.Sprintf("nats://127.0.0.1:%d", servers[0].routePort))
			}
		}
		s, err := launch(bin, fmt.Sprintf("bench-%d", i), args)
		if err != nil {
			return fail(err)
		}
		if profile {
			s.profPort = profPorts[i]
		}
		servers = append(servers, s)
		// The seed's route port is needed by the others.
		if err := s.waitFor(ctx, func() bool { return s.clientPort > 0 && (n < 2 || s.routePort > 0) }); err != nil {
			return fail(err)
		}
	}
	for _, s := range servers {
		if err := s.waitFor(ctx, func() bool { return s.routes >= n-1 }); err != nil {
			return fail(err)
		}
	}
	if storeDir != "" {
		if err := waitJetStream(ctx, servers[0].url()); err != nil {
			return fail(err)
		}
	}
	return servers, nil
}

// freePorts returns n loopback ports the kernel had free a moment ago (a JetStream
// cluster's route ports must be known before the servers start).
func freePorts(n int) ([]int, error) {
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("a free route port: %w", err)
		}
		defer ln.Close() // held until all are picked, so that they differ
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// routesBut is the --routes of server i: every other server's route URL.
func routesBut(ports []int, i int) string {
	var urls []string
	for j, p := range ports {
		if j != i {
			urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", p))
		}
	}
	return strings.Join(urls, ",")
}

// waitJetStream polls the server at url until JetStream answers an account info
// request: in a cluster, once a meta leader is elected and streams can be created.
func waitJetStream(ctx context.Context, url string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("jetstream readiness: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("jetstream not ready on %s: %w (last: %v)", url, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func launch(bin, id string, args []string) (*server, error) {
	s := &server{id: id, done: make(chan struct{}), changed: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.SysProcAttr = loadkit.ChildAttr()
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		defer close(s.done)
		s.readLog(stderr)
		s.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
	}()
	return s, nil
}

// readLog follows the server's log until it closes stderr (exits).
func (s *server) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		if m := clientRe.FindStringSubmatch(line); m != nil {
			s.clientPort, _ = strconv.Atoi(m[1])
		}
		if m := routeRe.FindStringSubmatch(line); m != nil {
			s.routePort, _ = strconv.Atoi(m[1])
		}
		if strings.Contains(line, "Route connection created") {
			s.routes++
		}
		s.log = append(s.log, line)
		if len(s.log) > 40 {
			s.log = s.log[len(s.log)-40:]
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// waitFor waits until cond (called with s.mu held) holds, the server exits or ctx ends.
func (s *server) waitFor(ctx context.Context, cond func() bool) error {
	for {
		s.mu.Lock()
		ok, changed := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-s.done:
			return fmt.Errorf("nats-server %s exited (%s); its log ends:\n%s", s.id, s.cmd.ProcessState, s.tail())
		case <-ctx.Done():
			return fmt.Errorf("nats-server %s not ready: %w; its log ends:\n%s", s.id, ctx.Err(), s.tail())
		}
	}
}

func (s *server) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.log, "\n")
}

func (s *server) url() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d", s.clientPort)
}

// stopServers sends SIGTERM to every server, waits up to timeout for each, and kills
// the stragglers.
func stopServers(servers []*server, timeout time.Duration) {
	for _, s := range servers {
		s.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, s := range servers {
		select {
		case <-s.done:
		case <-deadline.C:
			deadline.Reset(0)
			s.cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
			<-s.done
		}
	}
}

// cpu returns the user+sys CPU each server has used so far; nil if /proc cannot be
// read.
func cpu(servers []*server) []time.Duration {
	out := make([]time.Duration, len(servers))
	for i, s := range servers {
		d, err := loadkit.ProcCPU(s.cmd.Process.Pid)
		if err != nil {
			return nil
		}
		out[i] = d
	}
	return out
}
