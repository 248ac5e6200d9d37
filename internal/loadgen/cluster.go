package loadgen

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/freeport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// readyPoll is how often a starting node's health is checked.
const readyPoll = 20 * time.Millisecond

// stderrTail is how much of a spawned node's stderr is kept, to explain a failed start.
const stderrTail = 8 << 10

// cluster is the set of `sidecar serve` processes of a --spawn run. Run's goroutine
// calls its methods; the only other goroutines are the waiters, one per child, which
// the cluster starts and stop waits for.
type cluster struct {
	children []*child
	ports    *freeport.Set  // the children's ports, reserved until stop
	wg       sync.WaitGroup // the waiters
}

// child is one spawned node.
type child struct {
	id, appAddr, peerAddr string
	cmd                   *exec.Cmd
	stderr                *tailBuffer
	// exited is closed by the waiter when cmd.Wait returns; cmd.ProcessState is set
	// from then on.
	exited chan struct{}
}

// spawnArgs is the serve command line of node i of n, given every node's peer address.
// "{id}" in an extra flag becomes the node's id. On the JetStream transport (an extra
// --transport=jetstream) a node has no peers and no peer listener, so neither
// --peers nor --peer-addr is given.
func spawnArgs(i int, id, appAddr string, peerAddrs []string, extra []string) []string {
	args := []string{"serve", "--node-id=" + id, "--app-addr=" + appAddr}
	if !jetstreamTransport(extra) {
		others := make([]string, 0, len(peerAddrs)-1)
		for j, a := range peerAddrs {
			if j != i {
				others = append(others, a)
			}
		}
		args = append(args, "--peer-addr="+peerAddrs[i], "--admin-addr=", "--peers="+strings.Join(others, ","))
	} else {
		args = append(args, "--admin-addr=")
	}
	args = append(args, "--log-level=warn")
	for _, f := range extra { // a later flag wins: --log-level can be overridden
		args = append(args, strings.ReplaceAll(f, "{id}", id)) // one --data-dir per node
	}
	return args
}

// jetstreamTransport reports whether serve flags choose the JetStream transport
// (--transport=jetstream or --transport jetstream; the last one given wins, as in
// serve).
func jetstreamTransport(flags []string) bool {
	js := false
	for i, f := range flags {
		switch {
		case strings.HasPrefix(f, "--transport="):
			js = strings.TrimPrefix(f, "--transport=") == "jetstream"
		case f == "--transport" && i+1 < len(flags):
			js = flags[i+1] == "jetstream"
		}
	}
	return js
}

// startCluster spawns cfg.Spawn nodes on loopback ports reserved with freeport, in a
// full mesh, and waits until every one reports SERVING. On error every started process
// is stopped.
func startCluster(ctx context.Context, cfg *Config) (*cluster, error) {
	ports, err := freeport.Take(2 * cfg.Spawn)
	if err != nil {
		return nil, fmt.Errorf("--spawn: %w", err)
	}
	addrs := ports.Addrs()
	peerAddrs := addrs[cfg.Spawn:]
	c := &cluster{ports: ports}
	for i := range cfg.Spawn {
		id := fmt.Sprintf("bench-%d", i)
		if err := c.launch(cfg.Binary, id, spawnArgs(i, id, addrs[i], peerAddrs, cfg.ServeFlags)); err != nil {
			c.stop(cfg.StopTimeout)
			return nil, err
		}
		c.children[i].appAddr, c.children[i].peerAddr = addrs[i], peerAddrs[i]
	}
	for _, ch := range c.children {
		if err := ch.waitReady(ctx, cfg.ReadyTimeout); err != nil {
			c.stop(cfg.StopTimeout)
			return nil, err
		}
	}
	return c, nil
}

func (c *cluster) launch(bin, id string, args []string) error {
	ch := &child{id: id, stderr: &tailBuffer{max: stderrTail}, exited: make(chan struct{})}
	ch.cmd = exec.Command(bin, args...)
	ch.cmd.Stderr = ch.stderr
	ch.cmd.SysProcAttr = loadkit.ChildAttr()
	if err := ch.cmd.Start(); err != nil {
		return fmt.Errorf("--spawn: start %s: %w", bin, err)
	}
	c.children = append(c.children, ch)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ch.cmd.Wait() //nolint:errcheck // the exit status is read from ProcessState
		close(ch.exited)
	}()
	return nil
}

// appAddrs returns the app address of every node, in order.
func (c *cluster) appAddrs() []string {
	out := make([]string, len(c.children))
	for i, ch := range c.children {
		out[i] = ch.appAddr
	}
	return out
}

// stop sends SIGTERM to every node still running, waits up to timeout for each to
// exit, kills the stragglers, waits for the waiters and releases the ports. It is safe
// to call twice.
func (c *cluster) stop(timeout time.Duration) {
	for _, ch := range c.children {
		ch.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, ch := range c.children {
		select {
		case <-ch.exited:
		case <-deadline.C:
			deadline.Reset(0)
			ch.cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
			<-ch.exited
		}
	}
	c.wg.Wait()
	c.ports.Release()
}

// cpu returns the user+sys CPU each running node has used so far, from /proc. ok is
// false where /proc cannot be read.
func (c *cluster) cpu() ([]time.Duration, bool) {
	out := make([]time.Duration, len(c.children))
	for i, ch := range c.children {
		d, err := loadkit.ProcCPU(ch.cmd.Process.Pid)
		if err != nil {
			return nil, false
		}
		out[i] = d
	}
	return out, true
}

// conns counts each node's established TCP connections, but for those on its app port
// (the bench's own clients): its peers' (the mesh) or its NATS connection (JetStream).
// A node whose count cannot be read gets none.
func (c *cluster) conns() []*int {
	out := make([]*int, len(c.children))
	for i, ch := range c.children {
		_, port, err := net.SplitHostPort(ch.appAddr)
		if err != nil {
			continue
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			continue
		}
		if n, err := loadkit.TCPConns(ch.cmd.Process.Pid, p); err == nil {
			out[i] = &n
		}
	}
	return out
}

// waitReady polls the node's health service until SERVING, the process exits, timeout
// passes or ctx is done.
func (ch *child) waitReady(ctx context.Context, timeout time.Duration) error {
	cc, err := dialApp(ch.appAddr)
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{Service: "fanout.v1.FanoutService"})
		ccancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-ch.exited:
			return fmt.Errorf("--spawn: node %s exited before it was ready (%s); its stderr ends:\n%s", ch.id, ch.cmd.ProcessState, ch.stderr)
		case <-ctx.Done():
			return fmt.Errorf("--spawn: node %s not ready on %s: %w (last health check: %v)", ch.id, ch.appAddr, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// dialApp connects to a sidecar's app listener (host:port or unix:///path). A refused
// connection is retried within milliseconds: spawned nodes are dialled while they
// start.
func dialApp(addr string) (*grpc.ClientConn, error) {
	target := addr
	if !strings.HasPrefix(addr, "unix://") {
		target = "passthrough:///" + addr
	}
	cc, err := grpc.NewClient(target, append(frame.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return cc, nil
}

// tailBuffer keeps the last max bytes written to it. It is an io.Writer for a child's
// stderr (exec copies into it from its own goroutine) and a fmt.Stringer.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	buf []byte // guarded by mu; len(buf) <= 2*max
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	return string(b)
}
