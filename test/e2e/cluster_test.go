package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/internal/testbin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// readinessService is the named health service of the app listener: NOT_SERVING until
// the node's bootstrap sync with its peers has ended (or --sync-timeout passed), and
// while it drains. The empty service name is liveness: SERVING once the process
// listens.
const readinessService = "fanout.v1.FanoutService"

// Deadlines of the harness. They are generous for a loaded 2-core CI machine; a
// healthy run never comes close.
const (
	readyTimeout = 15 * time.Second // from exec to a health service SERVING
	exitTimeout  = 15 * time.Second // from a signal to process exit (beyond --shutdown-timeout)
	// stepTimeout: for a node to show one step of its own (a stream registered or
	// gone, a worker busy, every thread stopped): a local call and scheduling, which
	// a loaded machine delays by seconds.
	stepTimeout = 15 * time.Second
	// callTimeout bounds one call the harness makes to a node to read its state
	// (GetStatus, a health check, a /metrics scrape): 2s was missed on a loaded
	// machine, where a scrape of every series took longer to answer and to read.
	callTimeout  = 10 * time.Second
	pollInterval = 10 * time.Millisecond
	logTailBytes = 32 << 10 // how much of a node's log a failed test prints
)

// nodeSpec describes one node of a cluster before it starts.
type nodeSpec struct {
	// ID is passed as --node-id; empty leaves the flag off (the node then takes
	// FANOUT_NODE_ID or the hostname).
	ID string
	// Flags are extra `serve` flags, e.g. "--max-event-bytes=1024".
	Flags []string
	// Env are extra KEY=VALUE entries. The test process's own FANOUT_* variables are
	// never inherited.
	Env []string
}

// specs returns n specs with ids A, B, C, …, each with the given flags.
func specs(n int, flags ...string) []nodeSpec {
	out := make([]nodeSpec, n)
	for i := range out {
		out[i] = nodeSpec{ID: string(rune('A' + i)), Flags: append([]string(nil), flags...)}
	}
	return out
}

// cluster is a set of sidecar processes on loopback, each peered with all the others.
// Its methods are called from the test goroutine only.
type cluster struct {
	t     *testing.T
	nodes []*node
}

// node is one sidecar process. Its ports stay the same across restarts.
type node struct {
	t                            *testing.T
	index                        int
	spec                         nodeSpec
	appAddr, peerAddr, adminAddr string
	// peers is this node's --peers, one entry per other node (keyed by its index).
	// route changes an entry, e.g. to a proxy, before the node starts.
	peers   map[int]string
	logPath string

	cmd      *exec.Cmd        // nil before the first start
	done     chan struct{}    // closed when cmd has exited; cmd.ProcessState is then set
	cc       *grpc.ClientConn // app listener connection of the current process
	launched time.Time        // when the current process was started
}

// newCluster reserves ports for every spec and returns the cluster unstarted, so that
// routes can still be changed. startCluster is newCluster + start.
func newCluster(t *testing.T, ss ...nodeSpec) *cluster {
	t.Helper()
	addrs := freeAddrs(t, 3*len(ss))
	c := &cluster{t: t}
	dir := t.TempDir()
	for i, s := range ss {
		n := &node{
			t: t, index: i, spec: s,
			appAddr: addrs[3*i], peerAddr: addrs[3*i+1], adminAddr: addrs[3*i+2],
			peers:   make(map[int]string),
			logPath: filepath.Join(dir, fmt.Sprintf("node%d-%s.log", i, s.ID)),
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		for _, p := range c.nodes {
			if p != n {
				n.peers[p.index] = p.peerAddr
			}
		}
	}
	t.Cleanup(c.cleanup)
	return c
}

func startCluster(t *testing.T, ss ...nodeSpec) *cluster {
	t.Helper()
	c := newCluster(t, ss...)
	c.start()
	return c
}

// route makes node from reach node to at addr (a proxy in front of to's peer
// listener) instead of to's own peer address. Call it before start or restart.
func (c *cluster) route(from, to int, addr string) { c.nodes[from].peers[to] = addr }

// start starts every node and waits until all are live and ready (bootstrapped).
func (c *cluster) start() {
	c.t.Helper()
	for _, n := range c.nodes {
		n.launch()
	}
	for _, n := range c.nodes {
		n.waitReady()
	}
}

// setFlag sets a serve flag of n for its next start: "--name" becomes
// "--name=value", in place of any earlier value.
func (n *node) setFlag(name, value string) {
	flags := slices.DeleteFunc(n.spec.Flags, func(f string) bool { return f == name || strings.HasPrefix(f, name+"=") })
	n.spec.Flags = append(flags, name+"="+value)
}

// node returns node i.
func (c *cluster) node(i int) *node { return c.nodes[i] }

// client returns a FanoutService client of node i's current process.
func (c *cluster) client(i int) fanoutv1.FanoutServiceClient { return c.nodes[i].client() }

// cleanup kills every process still running, and prints the logs of a failed test.
func (c *cluster) cleanup() {
	for _, n := range c.nodes {
		if n.running() {
			n.kill()
		}
		n.closeConn()
	}
	for _, n := range c.nodes {
		n.checkRaces()
	}
	if c.t.Failed() {
		for _, n := range c.nodes {
			c.t.Logf("---- log of node %d (%s), %s ----\n%s", n.index, n.spec.ID, n.logPath, n.logTail())
		}
	}
}

// freeAddrs reserves n loopback addresses (internal/freeport) for processes the test
// starts: nothing listens on them, and no other process, nor the kernel, takes them
// before the test ends (restarts find them free). They are released in cleanup, after
// a cluster's own cleanup (registered later, so run earlier) has killed its nodes.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	ports, err := freeport.Take(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ports.Release)
	return ports.Addrs()
}

// args is the serve command line of n.
func (n *node) args() []string {
	var peers []string
	for i := range len(n.peers) + 1 {
		if a, ok := n.peers[i]; ok {
			peers = append(peers, a)
		}
	}
	args := []string{"serve", "--app-addr=" + n.appAddr, "--admin-addr=" + n.adminAddr}
	if !slices.Contains(n.spec.Flags, "--transport=jetstream") { // which refuses the mesh's flags
		args = append(args, "--peer-addr="+n.peerAddr, "--peers="+strings.Join(peers, ","))
	}
	if n.spec.ID != "" {
		args = append(args, "--node-id="+n.spec.ID)
	}
	return append(args, n.spec.Flags...)
}

func (n *node) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FANOUT_") {
			env = append(env, kv)
		}
	}
	return append(env, n.spec.Env...)
}

// launch execs the process without waiting for it to be ready. Its stderr is appended
// to logPath.
func (n *node) launch() {
	n.t.Helper()
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatalf("node %d log: %v", n.index, err)
	}
	defer f.Close() // the child has its own descriptor
	fmt.Fprintf(f, "==== %s exec %s %s\n", time.Now().Format(time.RFC3339Nano), sidecarBin, strings.Join(n.args(), " "))
	cmd := exec.Command(sidecarBin, n.args()...)
	cmd.Env = n.env()
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("node %d: start: %v", n.index, err)
	}
	n.cmd, n.done, n.launched = cmd, make(chan struct{}), time.Now()
	done := n.done
	go func() {
		cmd.Wait() // the exit status is read from cmd.ProcessState
		close(done)
	}()
	cc, err := dialFast(n.appAddr)
	if err != nil {
		n.t.Fatalf("node %d: dial: %v", n.index, err)
	}
	n.cc = cc
}

// dialFast returns a plaintext client connection that retries a refused connection
// within milliseconds, not gRPC's default backoff of a second and more: the harness
// connects while a process is still starting, or restarting.
func dialFast(addr string) (*grpc.ClientConn, error) {
	target := "passthrough:///" + addr
	if strings.HasPrefix(addr, "unix://") {
		target = addr // gRPC's own resolver for unix sockets
	}
	return grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
}

// waitReady waits until the node is live (the empty health service name SERVING)
// and ready (readinessService SERVING: its bootstrap sync has ended). It fails the
// test if the process exits first or readyTimeout passes for either.
func (n *node) waitReady() {
	n.t.Helper()
	n.waitServing("")
	n.waitServing(readinessService)
}

// waitServing polls the app listener's health service named service ("" is
// liveness) until it reports SERVING, and returns how long after the process's
// start that was. It fails the test if the process exits first or readyTimeout
// passes.
func (n *node) waitServing(service string) time.Duration {
	n.t.Helper()
	hc := healthpb.NewHealthClient(n.cc)
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return time.Since(n.launched)
		}
		last = err
		if err == nil {
			last = fmt.Errorf("health %s", resp.GetStatus())
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("node %d (%s): health service %q not SERVING after %s: %v", n.index, n.spec.ID, service, readyTimeout, last)
		}
		select {
		case <-n.done:
			n.t.Fatalf("node %d (%s) exited before health service %q was SERVING: %s", n.index, n.spec.ID, service, n.cmd.ProcessState)
		case <-tick.C:
		}
	}
}

// health returns the app listener's liveness (the empty service name), or an error.
func (n *node) health() (healthpb.HealthCheckResponse_ServingStatus, error) {
	return n.healthOf("")
}

// healthOf returns the status of the app listener's health service named service.
func (n *node) healthOf(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(n.cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

func (n *node) client() fanoutv1.FanoutServiceClient {
	if n.cc == nil {
		n.t.Fatalf("node %d has never started", n.index)
	}
	return fanoutv1.NewFanoutServiceClient(n.cc)
}

// status calls GetStatus.
func (n *node) status() (*fanoutv1.GetStatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return n.client().GetStatus(ctx, &fanoutv1.GetStatusRequest{})
}

// readiness returns GetStatus's ready and ready_reason.
func (n *node) readiness() (bool, string, error) {
	st, err := n.status()
	return st.GetReady(), st.GetReadyReason(), err
}

// metric scrapes n's /metrics (--admin-addr) and returns the sum of the samples of
// name whose labels include every label given as `key="value"`.
func (n *node) metric(name string, labels ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.adminAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("node %s /metrics: %w", n.spec.ID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("node %s /metrics: %s, %v", n.spec.ID, resp.Status, err)
	}
	sum, found := 0.0, false
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest[0] != '{' && rest[0] != ' ') {
			continue // a comment, another metric or one whose name only begins with name
		}
		lbls, value := "", strings.TrimSpace(rest)
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			lbls, value = rest[:i+1], strings.TrimSpace(rest[i+1:])
		}
		if !all(labels, func(l string) bool { return strings.Contains(lbls, l) }) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("node %s /metrics: %q: %w", n.spec.ID, line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("node %s /metrics has no %s with %v", n.spec.ID, name, labels)
	}
	return sum, nil
}

func all[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if !f(v) {
			return false
		}
	}
	return true
}

// peerStatus returns the entry of n's GetStatus for the peer it reaches at the
// address it was given for node to (so it also works through a proxy).
func (n *node) peerStatus(to int) (*fanoutv1.PeerStatus, error) {
	st, err := n.status()
	if err != nil {
		return nil, err
	}
	addr := n.peers[to]
	for _, p := range st.GetPeers() {
		if p.GetAddress() == addr {
			return p, nil
		}
	}
	return nil, fmt.Errorf("node %d lists no peer %s (node %d)", n.index, addr, to)
}

func (n *node) running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process.
//
// SIGSTOP returns once every thread of the process has stopped. kill(2) wakes one
// thread to begin the group stop; until that thread has run, the others run on, and
// a thread that network data woke can still answer a call. On a loaded machine that
// took long enough for A to get a Replicate answered by a "frozen" C.
func (n *node) signal(sig syscall.Signal) {
	n.t.Helper()
	if err := n.cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("node %d: signal %s: %v", n.index, sig, err)
	}
	if sig == syscall.SIGSTOP {
		waitStopped(n.t, n.cmd.Process.Pid, fmt.Sprintf("node %d (%s)", n.index, n.spec.ID))
	}
}

// waitStopped waits until every thread of process pid, named what, has stopped after
// a SIGSTOP (see node.signal).
func waitStopped(t testing.TB, pid int, what string) {
	t.Helper()
	eventually(t, stepTimeout, what+" to stop", func() error { return testbin.AllStopped(pid) })
}

// wait waits up to timeout for the process to exit and returns its state.
func (n *node) wait(timeout time.Duration) (*os.ProcessState, error) {
	select {
	case <-n.done:
		return n.cmd.ProcessState, nil
	case <-time.After(timeout):
		return nil, fmt.Errorf("node %d (%s) still running %s after the signal", n.index, n.spec.ID, timeout)
	}
}

// stop sends SIGTERM, waits for the exit and returns the exit code. It fails the test
// if the process is still running after --shutdown-timeout plus exitTimeout.
func (n *node) stop() int {
	n.t.Helper()
	n.signal(syscall.SIGTERM)
	st, err := n.wait(exitTimeout)
	if err != nil {
		n.t.Fatal(err)
	}
	n.closeConn()
	return st.ExitCode()
}

// kill sends SIGKILL and waits for the exit. It also ends a SIGSTOPped process.
func (n *node) kill() {
	n.t.Helper()
	if err := n.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		n.t.Errorf("node %d: kill: %v", n.index, err)
	}
	<-n.done
	n.closeConn()
}

// restart starts the node again on the same ports and waits until it is ready. The
// previous process must have exited (stop or kill).
func (n *node) restart() {
	n.t.Helper()
	if n.running() {
		n.t.Fatalf("node %d: restart while running", n.index)
	}
	n.launch()
	n.waitReady()
}

func (n *node) closeConn() {
	if n.cc != nil {
		n.cc.Close()
	}
}

func (n *node) logTail() string {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > logTailBytes {
		b = append([]byte("…"), b[len(b)-logTailBytes:]...)
	}
	return string(b)
}

// log returns the whole log of the node (every process it ran).
func (n *node) log() string {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		n.t.Fatalf("node %d log: %v", n.index, err)
	}
	return string(b)
}

// checkRaces fails the test if a race-enabled sidecar reported a data race.
func (n *node) checkRaces() {
	if !sidecarRace {
		return
	}
	b, _ := os.ReadFile(n.logPath)
	if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
		n.t.Errorf("node %d (%s) reported a data race; see its log", n.index, n.spec.ID)
	}
}

// eventually polls cond every pollInterval until it returns nil, and fails the test
// with cond's last error if timeout passes first.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, timeout, err)
		}
		<-tick.C
	}
}
