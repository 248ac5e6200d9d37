// Command clientbench compares two ways a Go app writes through pkg/client, one event
// per call from many goroutines: plain unary Submit (Client.Put) and the asynchronous
// Publisher (Publisher.Put, then the Pending's Wait), which pipelines and batches the
// concurrent puts onto one SubmitStream. It spawns a cluster of `sidecar serve`
// processes on loopback (or drives running ones with --app-addr), puts through the
// first node, and runs the modes interleaved, --runs times each, so that a drift of
// the machine falls on every mode alike.
//
//	go build -o bin/sidecar ./cmd/sidecar
//	go run ./bench/clientbench --sidecar bin/sidecar --runs 3 --duration 5s
//
// Each run: --warmup of load not measured, then --duration measured. A line per run
// gives events per second answered (accepted, with the ack policy met), the latency
// of one put (call to result: p50, p99), and the CPU the nodes spent per event (all
// nodes, from /proc). Then the median of each mode over its runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/fanout/fanout/bench/loadkit"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/pkg/client"
	"google.golang.org/grpc/health/grpc_health_v1"
)

type config struct {
	sidecar    string
	appAddr    string
	nodes      int
	goroutines int
	payload    int
	keys       int
	ack        string
	runs       int
	duration   time.Duration
	warmup     time.Duration
	modes      []string
	serveFlags []string
	inFlight   int
	batch      int
}

func main() {
	var cfg config
	var modes string
	var serveFlags string
	flag.StringVar(&cfg.sidecar, "sidecar", "bin/sidecar", "the sidecar binary to spawn (go build -o bin/sidecar ./cmd/sidecar)")
	flag.StringVar(&cfg.appAddr, "app-addr", "", "the app address of a running node to put through, instead of spawning --nodes (CPU is then not measured)")
	flag.IntVar(&cfg.nodes, "nodes", 3, "nodes to spawn, each peered with the others")
	flag.IntVar(&cfg.goroutines, "goroutines", 64, "goroutines putting one event at a time")
	flag.IntVar(&cfg.payload, "payload", 100, "payload bytes per event")
	flag.IntVar(&cfg.keys, "keys", 1000, "distinct keys per goroutine (written in turn)")
	flag.StringVar(&cfg.ack, "ack", "queued", "ack policy: queued, one, quorum or all")
	flag.IntVar(&cfg.runs, "runs", 3, "runs of each mode, interleaved")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured time of a run")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "load before each run's measured time")
	flag.StringVar(&modes, "modes", "unary,publisher", "modes, in the order of each round: unary (Client.Put), publisher (Publisher.Put, then Wait), publisher1 (the same with one event per request and 64 in flight: the sidecar answers runs of requests in windows)")
	flag.IntVar(&cfg.batch, "max-batch-events", 0, "the publisher's MaxBatchEvents (0: its default, 10000)")
	flag.IntVar(&cfg.inFlight, "max-in-flight", 0, "the publisher's MaxInFlight (0: its default)")
	flag.StringVar(&serveFlags, "serve-flags", "", "extra serve flags for the spawned nodes, space-separated")
	flag.Parse()
	cfg.modes = strings.Split(modes, ",")
	cfg.serveFlags = strings.Fields(serveFlags)
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "clientbench:", err)
		os.Exit(1)
	}
}

var acks = map[string]client.AckPolicy{"queued": client.Queued, "one": client.One, "quorum": client.Quorum, "all": client.All}

type result struct {
	mode      string
	events    int64
	failed    int64
	perSec    float64
	lat       loadkit.Latency
	cpuPerEvt time.Duration // all nodes
	requests  uint64        // publisher: requests sent in the measured window
	answers   uint64        // publisher: answers received in the measured window
}

func run(cfg config) error {
	ack, ok := acks[cfg.ack]
	if !ok {
		return fmt.Errorf("--ack %q: want queued, one, quorum or all", cfg.ack)
	}
	for _, m := range cfg.modes {
		if m != "unary" && m != "publisher" && m != "publisher1" {
			return fmt.Errorf("--modes: %q: want unary, publisher or publisher1", m)
		}
	}
	addr := cfg.appAddr
	var pids []int
	if addr == "" {
		c, err := spawn(cfg)
		if err != nil {
			return err
		}
		defer c.stop()
		addr, pids = c.apps[0], c.pids()
	}
	c, err := client.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("clientbench: %d goroutines, one event of %d bytes per put, ack %s, through %s; %d runs of %s (+%s warm-up), modes %v\n",
		cfg.goroutines, cfg.payload, cfg.ack, addr, cfg.runs, cfg.duration, cfg.warmup, cfg.modes)
	byMode := make(map[string][]result)
	for r := range cfg.runs {
		for _, mode := range cfg.modes {
			res, err := runOnce(cfg, c, mode, ack, pids, r)
			if err != nil {
				return err
			}
			fmt.Printf("run %d %-9s %8.0f events/s  p50 %6dµs  p99 %6dµs  node CPU %5.1fµs/event  failed %d%s\n",
				r+1, mode, res.perSec, res.lat.P50, res.lat.P99, float64(res.cpuPerEvt.Nanoseconds())/1000, res.failed, batchNote(res))
			byMode[mode] = append(byMode[mode], res)
		}
	}
	fmt.Println("median of the runs:")
	for _, mode := range cfg.modes {
		rs := byMode[mode]
		fmt.Printf("  %-9s %8.0f events/s  p50 %6dµs  p99 %6dµs  node CPU %5.1fµs/event\n", mode,
			median(rs, func(r result) float64 { return r.perSec }),
			int64(median(rs, func(r result) float64 { return float64(r.lat.P50) })),
			int64(median(rs, func(r result) float64 { return float64(r.lat.P99) })),
			median(rs, func(r result) float64 { return float64(r.cpuPerEvt.Nanoseconds()) / 1000 }))
	}
	return nil
}

func batchNote(r result) string {
	if r.mode == "unary" || r.requests == 0 {
		return ""
	}
	return fmt.Sprintf("  (%.1f events per request, %.2f answers per request)", float64(r.events)/float64(r.requests), float64(r.answers)/float64(r.requests))
}

func median(rs []result, f func(result) float64) float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	if len(vs) == 0 {
		return 0
	}
	return vs[len(vs)/2]
}

// runOnce runs one mode: warm-up, then the measured window.
func runOnce(cfg config, c *client.Client, mode string, ack client.AckPolicy, pids []int, round int) (result, error) {
	var pub *client.Publisher
	if mode != "unary" {
		pc := client.PublisherConfig{Ack: ack, MaxInFlight: cfg.inFlight, MaxBatchEvents: cfg.batch}
		if mode == "publisher1" { // one event per request: answers in windows
			pc.MaxBatchEvents, pc.MaxInFlight = 1, 64
		}
		var err error
		pub, err = client.NewPublisher(c, pc)
		if err != nil {
			return result{}, err
		}
		defer pub.Close()
	}
	put := func(ctx context.Context, key string, value []byte) error {
		if pub == nil {
			_, err := c.Put(ctx, key, value, client.WithAck(ack))
			return err
		}
		f, err := pub.Put(ctx, key, value)
		if err != nil {
			return err
		}
		_, err = f.Wait(ctx)
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var measuring atomic.Bool
	var events, failed atomic.Int64
	hists := make([]*hdrhistogram.Histogram, cfg.goroutines)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	value := make([]byte, cfg.payload)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	for g := range cfg.goroutines {
		h := loadkit.NewHistogram()
		hists[g] = h
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("clientbench/%s/r%d/g%03d/k%05d", mode, round, g, i%cfg.keys)
				start := time.Now()
				err := put(ctx, key, value)
				if ctx.Err() != nil {
					return
				}
				if !measuring.Load() {
					continue
				}
				if err != nil {
					failed.Add(1)
					if !errors.Is(err, client.ErrNotSatisfied) {
						firstErr.CompareAndSwap(nil, err)
					}
					continue
				}
				events.Add(1)
				h.RecordValue(loadkit.Us(time.Since(start)))
			}
		})
	}
	time.Sleep(cfg.warmup)
	cpu0 := nodesCPU(pids)
	var st0 client.PublisherStats
	if pub != nil {
		st0 = pub.Stats()
	}
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(cfg.duration)
	measuring.Store(false)
	took := time.Since(t0)
	cpu1 := nodesCPU(pids)
	res := result{mode: mode}
	if pub != nil {
		st1 := pub.Stats()
		res.requests, res.answers = st1.Requests-st0.Requests, st1.Answers-st0.Answers
	}
	cancel()
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return result{}, fmt.Errorf("%s: %w", mode, err)
	}
	all := loadkit.NewHistogram()
	for _, h := range hists {
		all.Merge(h)
	}
	res.events, res.failed = events.Load(), failed.Load()
	res.perSec = float64(res.events) / took.Seconds()
	res.lat = loadkit.Summarize(all)
	if res.events > 0 && cpu1 > cpu0 {
		res.cpuPerEvt = (cpu1 - cpu0) / time.Duration(res.events)
	}
	return res, nil
}

func nodesCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		d, err := loadkit.ProcCPU(pid)
		if err == nil {
			total += d
		}
	}
	return total
}

// cluster is the spawned nodes.
type cluster struct {
	cmds  []*exec.Cmd
	apps  []string
	ports *freeport.Set
}

func (c *cluster) pids() []int {
	var p []int
	for _, cmd := range c.cmds {
		p = append(p, cmd.Process.Pid)
	}
	return p
}

func (c *cluster) stop() {
	for _, cmd := range c.cmds {
		cmd.Process.Kill()
		cmd.Wait()
	}
	c.ports.Release()
}

func spawn(cfg config) (*cluster, error) {
	if _, err := os.Stat(cfg.sidecar); err != nil {
		return nil, fmt.Errorf("--sidecar %s: %w (build it: go build -o bin/sidecar ./cmd/sidecar)", cfg.sidecar, err)
	}
	ports, err := freeport.Take(2 * cfg.nodes)
	if err != nil {
		return nil, err
	}
	addrs := ports.Addrs()
	c := &cluster{ports: ports}
	for i := range cfg.nodes {
		app, peer := addrs[2*i], addrs[2*i+1]
		var peers []string
		for j := range cfg.nodes {
			if j != i {
				peers = append(peers, addrs[2*j+1])
			}
		}
		args := append([]string{"serve", fmt.Sprintf("--node-id=n%d", i), "--app-addr=" + app, "--peer-addr=" + peer,
			"--admin-addr=", "--peers=" + strings.Join(peers, ","), "--log-level=error"}, cfg.serveFlags...)
		cmd := exec.Command(cfg.sidecar, args...)
		cmd.Stderr, cmd.SysProcAttr = os.Stderr, loadkit.ChildAttr()
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, err
		}
		c.cmds, c.apps = append(c.cmds, cmd), append(c.apps, app)
	}
	for _, app := range c.apps {
		if err := waitReady(app); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

func waitReady(app string) error {
	c, err := client.Dial(app)
	if err != nil {
		return err
	}
	defer c.Close()
	// The client's connection serves the health service too.
	h := grpc_health_v1.NewHealthClient(c.Conn())
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := h.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "fanout.v1.FanoutService"})
		cancel()
		if err == nil && r.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not ready after 60s: %v %v", app, r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
