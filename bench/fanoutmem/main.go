// Command fanoutmem is the fanout side of the memory workload of `make bench-compare`
// (memory@KEYS): it starts --nodes `sidecar serve` processes in a full mesh on
// loopback ports (each with --pprof-addr), puts --keys keys of --payload bytes
// through node 0 with the Go client's asynchronous Publisher (one Put per key), waits
// until every node's table holds them all, and reads every node's settled resident
// set (bench/loadkit.Settle: a forced GC through /debug/pprof/heap?gc=1, then the
// scavenger) before the keys and after. It prints one JSON line with the field names
// of `natsbench --memory-keys`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	"github.com/fanout/fanout/internal/freeport"
	"github.com/fanout/fanout/pkg/client"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

type options struct {
	sidecar      string
	nodes, keys  int
	payload      int
	settleMax    time.Duration
	wait         time.Duration
	readyTimeout time.Duration
	heapDir      string
}

type result struct {
	System  string `json:"system"`
	Nodes   int    `json:"nodes"`
	Keys    int    `json:"keys"`
	Payload int    `json:"payload"`
	// LoadSec is from the first put until every node held every key.
	LoadSec   float64  `json:"load_s"`
	NotPut    int64    `json:"publish_errors"` // puts not accepted
	StateKeys []uint64 `json:"state_keys"`     // each node's table at the end
	loadkit.MemorySummary
}

func main() {
	var o options
	flag.StringVar(&o.sidecar, "sidecar", "bin/sidecar", "the sidecar binary to spawn")
	flag.IntVar(&o.nodes, "nodes", 3, "sidecars to start, in a full mesh (>= 1)")
	flag.IntVar(&o.keys, "keys", 500000, "distinct keys to put through node 0 (>= 1)")
	flag.IntVar(&o.payload, "payload", 100, "bytes per value")
	flag.DurationVar(&o.settleMax, "settle-max", 30*time.Second, "the longest wait, after a forced GC, for the resident sets to stop falling")
	flag.DurationVar(&o.wait, "wait", 120*time.Second, "how long to wait for every node to hold every key")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 30*time.Second, "bound on each node's start")
	flag.StringVar(&o.heapDir, "heap-dir", "", "write each node's heap profile, taken once settled with the keys, to DIR/<node>.heap.pb.gz (go tool pprof) and DIR/<node>.heap.txt (with the runtime's MemStats)")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "fanoutmem:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := run(ctx, o)
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanoutmem:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	var errs []error
	if o.nodes < 1 {
		errs = append(errs, fmt.Errorf("--nodes must be >= 1, got %d", o.nodes))
	}
	if o.keys < 1 {
		errs = append(errs, fmt.Errorf("--keys must be >= 1, got %d", o.keys))
	}
	if o.payload < 0 {
		errs = append(errs, fmt.Errorf("--payload must be >= 0, got %d", o.payload))
	}
	if o.settleMax <= 0 || o.wait <= 0 || o.readyTimeout <= 0 {
		errs = append(errs, errors.New("--settle-max, --wait and --ready-timeout must be > 0"))
	}
	return errors.Join(errs...)
}

// node is one spawned sidecar.
type node struct {
	id, app, pprof string
	cmd            *exec.Cmd
	exited         chan struct{}
	c              *client.Client
}

func run(ctx context.Context, o options) (*result, error) {
	ports, err := freeport.Take(3 * o.nodes)
	if err != nil {
		return nil, err
	}
	defer ports.Release()
	addrs := ports.Addrs()
	apps, peers, pprofs := addrs[:o.nodes], addrs[o.nodes:2*o.nodes], addrs[2*o.nodes:]
	var nodes []*node
	defer func() { stopNodes(nodes) }()
	for i := range o.nodes {
		n := &node{id: fmt.Sprintf("mem-%d", i), app: apps[i], pprof: pprofs[i], exited: make(chan struct{})}
		var others []string
		for j, p := range peers {
			if j != i {
				others = append(others, p)
			}
		}
		n.cmd = exec.Command(o.sidecar, "serve", "--node-id="+n.id, "--app-addr="+n.app, "--peer-addr="+peers[i],
			"--admin-addr=", "--pprof-addr="+n.pprof, "--peers="+strings.Join(others, ","), "--log-level=warn")
		n.cmd.Stderr = os.Stderr
		n.cmd.SysProcAttr = loadkit.ChildAttr()
		if err := n.cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", o.sidecar, err)
		}
		go func() { n.cmd.Wait(); close(n.exited) }() //nolint:errcheck // the exit is reported by waitReady
		nodes = append(nodes, n)
		if n.c, err = client.New(ctx, n.app); err != nil {
			return nil, err
		}
	}
	for _, n := range nodes {
		if err := n.waitReady(ctx, o.readyTimeout); err != nil {
			return nil, err
		}
	}
	pids, gcURLs, ids := make([]int, len(nodes)), make([]string, len(nodes)), make([]string, len(nodes))
	for i, n := range nodes {
		pids[i], ids[i], gcURLs[i] = n.cmd.Process.Pid, n.id, "http://"+n.pprof+"/debug/pprof/heap?gc=1"
	}
	before, err := loadkit.Settle(ctx, pids, gcURLs, o.settleMax)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	r := &result{System: "fanout", Nodes: o.nodes, Keys: o.keys, Payload: o.payload}
	start := time.Now()
	if r.NotPut, err = put(ctx, nodes, o); err != nil {
		return nil, err
	}
	if r.StateKeys, err = waitHeld(ctx, nodes, uint64(o.keys), o.wait); err != nil {
		return nil, err
	}
	r.LoadSec = time.Since(start).Seconds()
	after, err := loadkit.Settle(ctx, pids, gcURLs, o.settleMax)
	if err != nil {
		return nil, fmt.Errorf("settled: %w", err)
	}
	r.MemorySummary = loadkit.SummarizeMemory(ids, before, after, o.keys)
	if o.heapDir != "" {
		for _, n := range nodes {
			if err := saveHeap(ctx, "http://"+n.pprof+"/debug/pprof/heap", filepath.Join(o.heapDir, n.id+".heap.pb.gz")); err != nil {
				return nil, err
			}
			// The text form ends with the runtime's MemStats: what of the RSS is heap
			// in use, free heap kept, released, stacks.
			if err := saveHeap(ctx, "http://"+n.pprof+"/debug/pprof/heap?debug=1", filepath.Join(o.heapDir, n.id+".heap.txt")); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// chunk is the flow control of the load: the keys are put in chunks of this many, and
// a chunk is put only once every node holds all but the last chunk (at most 2 chunks
// not yet everywhere; natsbench's KV publisher keeps at most 4096 puts unacknowledged).
// Without it the origin's per-peer buffers (10,000 events) overflow and the keys
// dropped there arrive only with anti-entropy, tens of seconds later.
const chunk = 4096

// put writes o.keys keys through one Publisher, one Put each (ack QUEUED, the
// default), as an app would, and counts those not accepted. A checker goroutine reads
// the results in order. (With ack ALL the origin keeps completed operations'
// purgatory watch entries and event copies, about 700 B per key at 100,000 keys: a
// cost of the ack policy, not of the live keys, so it is not used here.)
func put(ctx context.Context, nodes []*node, o options) (int64, error) {
	p, err := client.NewPublisher(nodes[0].c, client.PublisherConfig{})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	value := make([]byte, o.payload) // not changed: every Put may share it
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	pending := make(chan *client.Pending, chunk)
	failed := make(chan int64, 1)
	go func() {
		var n int64
		for f := range pending {
			if _, err := f.Wait(context.Background()); err != nil {
				n++
			}
		}
		failed <- n
	}()
	prefix := fmt.Sprintf("bench/%x/", time.Now().UnixNano())
	var putErr error
	for i := 0; i < o.keys && putErr == nil; i++ {
		if i%chunk == 0 && i >= 2*chunk {
			_, putErr = waitHeld(ctx, nodes, uint64(i-chunk), o.wait)
			if putErr != nil {
				break
			}
		}
		var f *client.Pending
		if f, putErr = p.Put(ctx, fmt.Sprintf("%s%d", prefix, i), value); putErr == nil {
			pending <- f
		}
	}
	close(pending)
	if putErr == nil {
		putErr = p.Flush(ctx)
	}
	n := <-failed
	return n, putErr
}

// saveHeap writes what url answers (a heap profile) to path.
func saveHeap(ctx context.Context, url, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := loadkit.Fetch(ctx, url, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// waitHeld polls every node's GetStatus until its table holds keys keys (every 5 ms),
// or wait passes.
func waitHeld(ctx context.Context, nodes []*node, keys uint64, wait time.Duration) ([]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	held := make([]uint64, len(nodes))
	for {
		all := true
		for i, n := range nodes {
			st, err := n.c.Status(ctx)
			if err == nil {
				held[i] = st.GetState().GetKeys()
			}
			all = all && held[i] >= keys
		}
		if all {
			return held, nil
		}
		select {
		case <-ctx.Done():
			return held, fmt.Errorf("the nodes hold %v of %d keys after %s: %w", held, keys, wait, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (n *node) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := healthpb.NewHealthClient(n.c.Conn())
	for {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "fanout.v1.FanoutService"})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		select {
		case <-n.exited:
			return fmt.Errorf("node %s exited before it was ready (%s)", n.id, n.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready on %s: %w (last: %v)", n.id, n.app, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopNodes closes the clients, sends SIGTERM to every node and waits for each
// (SIGKILL after 15 s).
func stopNodes(nodes []*node) {
	for _, n := range nodes {
		if n.c != nil {
			n.c.Close()
		}
		n.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
	}
	for _, n := range nodes {
		select {
		case <-n.exited:
		case <-time.After(15 * time.Second):
			n.cmd.Process.Kill() //nolint:errcheck // it may have exited meanwhile
			<-n.exited
		}
	}
}
