package natstest

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/internal/testbin"
)

// ServerPackage is the nats-server that tools/go.mod pins and Build builds.
const ServerPackage = "github.com/nats-io/nats-server/v2"

// MaxServers bounds Config.Servers: server i listens on 127.0.0.(21+i).
const MaxServers = 16

// Build builds the pinned nats-server into dir and returns its path. A test binary
// calls it once, from TestMain (see the package doc).
func Build(dir string) (string, error) { return testbin.BuildTool(dir, ServerPackage) }

// Config says what cluster Start launches. Start copies it.
type Config struct {
	// Binary is the nats-server to run: the path Build returned, or another release
	// to compare against (Debian's /usr/sbin/nats-server, found with testbin.Find).
	Binary string
	// Servers is the number of servers, 1 to MaxServers. With one there is no
	// cluster (JetStream runs standalone, streams are R1) and Partition is refused.
	Servers int
	// ReadyTimeout bounds each wait of the helper: Start, Cluster.Start and Heal
	// for the servers to answer, Leader for a stream to have a leader.
	ReadyTimeout time.Duration
}

// DefaultConfig is three servers, the smallest cluster that keeps an R3 stream
// writable with one server down, and a 30 s ReadyTimeout: a Raft election alone takes
// 4–9 s (nats-server's election timeout), and a loaded 2-core machine can double it.
// Binary is left for the caller.
func DefaultConfig() Config {
	return Config{Servers: 3, ReadyTimeout: 30 * time.Second}
}

func (c Config) validate() error {
	if c.Binary == "" {
		return errors.New("natstest: Config.Binary is empty: pass the path natstest.Build returned")
	}
	if c.Servers < 1 || c.Servers > MaxServers {
		return fmt.Errorf("natstest: Config.Servers = %d: want 1 to %d", c.Servers, MaxServers)
	}
	if c.ReadyTimeout <= 0 {
		return fmt.Errorf("natstest: Config.ReadyTimeout = %v: want a positive duration (DefaultConfig has 30s)", c.ReadyTimeout)
	}
	return nil
}

// Cluster is a running set of nats-server processes and the links that carry their
// routes. Every method must be called from the test's goroutine: a failure ends the
// test.
type Cluster struct {
	t       testing.TB
	cfg     Config
	servers []*server // server i at index i
	// links[from][to] carries the routes from dials to to; nil where from == to, and
	// every entry nil with one server.
	links [][]*link
	// partitioned[i] is true between Partition(i) and Heal(i). Invariant: the link
	// between a and b is cut iff partitioned[a] || partitioned[b].
	partitioned []bool
	http        *http.Client // the monitoring endpoints; no keep-alive, so no idle goroutine
}

// Start launches cfg.Servers servers, waits until every one answers (see the package
// doc) and returns the cluster. Everything it starts is stopped in t's cleanup.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	n := cfg.Servers
	ports, err := freeport.Take(portsPerServer*n + n*(n-1))
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(ports.Release) // after the processes are killed: cleanups run last-first
	p := ports.Ports()
	c := &Cluster{
		t: t, cfg: cfg, partitioned: make([]bool, n),
		http: &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	for i := range n {
		c.servers = append(c.servers, newServer(i, cfg.Binary, t.TempDir(), p[portsPerServer*i:portsPerServer*(i+1)]))
	}
	t.Cleanup(c.cleanup)
	c.startLinks(p[portsPerServer*n:])
	for _, s := range c.servers {
		s.writeConfig(t, c.routeURLs(s.index))
		s.launch(t)
	}
	c.waitPlacement(c.waitReady(c.all()...))
	return c
}

// startLinks opens a link for every ordered pair of servers, on the given ports.
func (c *Cluster) startLinks(ports []int) {
	c.t.Helper()
	n := len(c.servers)
	if n == 1 {
		return
	}
	c.links = make([][]*link, n)
	for from := range n {
		c.links[from] = make([]*link, n)
		for to := range n {
			if from == to {
				continue
			}
			addr := hostPort(host(from), ports[0])
			ports = ports[1:]
			l, err := listenLink(from, to, addr, hostPort(host(to), c.servers[to].routePort))
			if err != nil {
				c.t.Fatalf("natstest: link %s→%s on %s: %v", c.servers[from].name, c.servers[to].name, addr, err)
			}
			c.links[from][to] = l
		}
	}
}

// routeURLs are the routes server i dials: one link to every other server (none
// with one server).
func (c *Cluster) routeURLs(i int) []string {
	if c.links == nil {
		return nil
	}
	var urls []string
	for to, l := range c.links[i] {
		if to != i {
			urls = append(urls, "nats-route://"+l.addr())
		}
	}
	return urls
}

// URLs returns every server's client URL, server i's at index i: what a client's
// nats.Connect or a sidecar's --nats-url takes (joined with ",").
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = s.clientURL()
	}
	return urls
}

// URL returns server i's client URL.
func (c *Cluster) URL(i int) string { return c.server(i).clientURL() }

// Name returns server i's server_name, as JetStream reports it (a stream's leader, a
// replica): "n0", "n1", ….
func (c *Cluster) Name(i int) string { return c.server(i).name }

// Index returns the index of the server named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, s := range c.servers {
		if s.name == name {
			return i
		}
	}
	return -1
}

// Running reports whether server i's process runs.
func (c *Cluster) Running(i int) bool { return c.server(i).running() }

// Log returns server i's log so far, across restarts.
func (c *Cluster) Log(i int) string { return c.server(i).log() }

// Connect returns a client connected to server i (it discovers the others, and
// reconnects to them if i goes away), closed in the test's cleanup. opts come after
// the helper's own (a name and a connect timeout), so they may override them.
func (c *Cluster) Connect(i int, opts ...nats.Option) *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(c.URL(i), append([]nats.Option{nats.Name(c.t.Name()), nats.Timeout(probeTimeout)}, opts...)...)
	if err != nil {
		c.t.Fatalf("natstest: connect to %s (%s): %v", c.Name(i), c.URL(i), err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// PID is server i's process id, 0 while it is not running: for a bench that reads the
// servers' CPU (sidecar bench --engine-pid).
func (c *Cluster) PID(i int) int {
	if s := c.server(i); s.cmd != nil {
		return s.cmd.Process.Pid
	}
	return 0
}

// Kill kills server i with SIGKILL and waits for it to exit: no shutdown, no
// leadership transfer, what is not synced to disk is lost. It is idempotent.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.server(i).kill()
}

// Stop stops server i with SIGTERM, a clean shutdown, and waits for it to exit (it
// is killed after ReadyTimeout). It is idempotent.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.server(i).stop(c.t, c.cfg.ReadyTimeout)
}

// Start starts servers is again, after Kill or Stop, with the same ports, stores and
// configuration (a restart), and waits until each answers (see the package doc). It
// launches them all before it waits: servers that were all down need one another
// to recover JetStream's meta layer.
func (c *Cluster) Start(is ...int) {
	c.t.Helper()
	for _, i := range is {
		s := c.server(i)
		if s.running() {
			c.t.Fatalf("natstest: Start(%d): %s is running: Kill or Stop it first", i, s.name)
		}
		s.launch(c.t)
	}
	for _, i := range is {
		c.waitReady(i)
	}
}

// Partition cuts server i off from every other server: every route from or to it is
// closed and redialed in vain until Heal(i). Clients still reach i on its client port.
// It returns at once: i's routes are closed, but the servers have not necessarily
// noticed yet. It fails the test of a one-server cluster.
func (c *Cluster) Partition(i int) {
	c.t.Helper()
	c.server(i)
	if c.links == nil {
		c.t.Fatalf("natstest: Partition(%d): a one-server cluster has no routes to cut", i)
	}
	c.partitioned[i] = true
	c.applyLinks(i)
}

// Heal undoes Partition(i): the links between i and every server that is not itself
// partitioned carry routes again. If i runs, it waits until i answers (see the
// package doc): routed to the others again and current with JetStream.
func (c *Cluster) Heal(i int) {
	c.t.Helper()
	c.server(i)
	if c.links == nil {
		c.t.Fatalf("natstest: Heal(%d): a one-server cluster has no routes", i)
	}
	c.partitioned[i] = false
	c.applyLinks(i)
	if c.server(i).running() {
		c.waitReady(i)
	}
}

// applyLinks sets the links between i and every other server to the partitioned
// invariant.
func (c *Cluster) applyLinks(i int) {
	for j := range c.servers {
		if j == i {
			continue
		}
		cut := c.partitioned[i] || c.partitioned[j]
		c.links[i][j].setCut(cut)
		c.links[j][i].setCut(cut)
	}
}

// connected reports whether the routes between a and b are not cut.
func (c *Cluster) connected(a, b int) bool { return !c.partitioned[a] && !c.partitioned[b] }

func (c *Cluster) server(i int) *server {
	c.t.Helper()
	if i < 0 || i >= len(c.servers) {
		c.t.Fatalf("natstest: no server %d: the cluster has %d", i, len(c.servers))
	}
	return c.servers[i]
}

func (c *Cluster) all() []int {
	idx := make([]int, len(c.servers))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// cleanup kills every server, closes the links and, if the test failed, prints the
// end of every server's log.
func (c *Cluster) cleanup() {
	for _, s := range c.servers {
		s.kill()
	}
	for _, row := range c.links {
		for _, l := range row {
			if l != nil {
				l.close()
			}
		}
	}
	if c.t.Failed() {
		for _, s := range c.servers {
			c.t.Logf("---- %s log (%s), last %d lines ----\n%s", s.name, s.logPath(), logTailLines, tail(s.log(), logTailLines))
		}
	}
}
