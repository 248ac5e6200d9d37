// Command natsbench is the NATS core anchor of `make bench-compare`: one publisher on
// server 0 and subscribers on the other servers of a NATS cluster it spawns (or
// several subscribers on one server), offered the same load as `sidecar bench` and
// timed the same way. The pacer, the stamps in the payloads, the latency histograms,
// the flow control of saturated runs and the CPU readings come from bench/loadkit,
// which `sidecar bench` uses too; docs/BENCH.md describes the method. It prints one
// JSON line with the field names of `sidecar bench --json`.
//
// It lives in its own module so that nats.go never enters the sidecar's go.mod; it
// imports bench/loadkit from the main module through a replace directive.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
)

type options struct {
	spawn        int
	natsServer   string
	url          string
	subscribers  int
	subject      string
	duration     time.Duration
	warmup       time.Duration
	drainTimeout time.Duration
	readyTimeout time.Duration
	rate         int
	batch        int
	payload      int
	window       int
	interval     time.Duration
	kv           string
	kvStorage    string
	replicas     int
	hold         bool
	watchers     int
	memoryKeys   int
	settleMax    time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.spawn, "spawn", 3, "start this many nats-server processes on loopback: 1 a single server, >= 2 a cluster with routes between every pair (publisher on server 0, one subscriber on each other server); 0 with --url")
	flag.StringVar(&o.natsServer, "nats-server", "nats-server", "the nats-server binary for --spawn")
	flag.StringVar(&o.url, "url", "", "drive a running server instead of spawning (CPU and RSS are then not reported)")
	flag.IntVar(&o.subscribers, "subscribers", 2, "subscriber connections with --spawn 1 or --url, all on that one server (a cluster has one per server but the first)")
	flag.StringVar(&o.subject, "subject", "bench", "subject to publish on")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured time, after the warmup")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "published before the measured time, not measured")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Second, "after the last publish, wait at most this long for the subscribers to catch up")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 15*time.Second, "bound on starting the servers and on the subscriptions reaching the publisher's server")
	flag.IntVar(&o.rate, "rate", 10000, "events/s offered, open loop (0: as fast as the publisher and --window let them go)")
	flag.IntVar(&o.batch, "batch", 1, "events per send: that many publishes back to back, one stamp (the equivalent of a Submit of that many events)")
	flag.IntVar(&o.payload, "payload", 100, "payload bytes per event (>= 8; the first 16 carry the send time and the due time)")
	flag.IntVar(&o.window, "window", 0, "with --rate 0: at most this many events published that some subscriber has not received yet (0: off)")
	flag.DurationVar(&o.interval, "interval", time.Second, "period of the progress line on stderr (0: none)")
	flag.StringVar(&o.kv, "kv", "", "the NATS KV anchor: servers with JetStream, and instead of core publishes, puts of unique keys (bench.<run>.<n>) into this KV bucket (created with --replicas, --kv-storage, history 1), acknowledged asynchronously, and a KV watcher (updates only) on each other server")
	flag.IntVar(&o.watchers, "watchers", 0, "with --kv on a cluster: this many watchers, round robin over the servers but the first (0: one on each of them), as N-1 sidecars would watch")
	flag.IntVar(&o.replicas, "replicas", 3, "with --kv: the bucket's replicas")
	flag.StringVar(&o.kvStorage, "kv-storage", "file", "with --kv: the bucket's storage, file or memory")
	flag.IntVar(&o.memoryKeys, "memory-keys", 0, "with --kv: instead of a timed run, the settled memory at this many live keys: every server's VmRSS after a forced GC (its --profile port) and the scavenger, before the keys and after putting them (one async put each, --payload bytes) and every watcher has them; one JSON line")
	flag.DurationVar(&o.settleMax, "settle-max", 30*time.Second, "with --memory-keys: the longest wait, after a forced GC, for the resident sets to stop falling")
	flag.BoolVar(&o.hold, "hold", false, "only start the --spawn servers with JetStream (a store each in a temporary directory), print one JSON line {urls, pids} on stdout, and keep them until SIGTERM or SIGINT; for sidecar bench --transport=jetstream, with --engine-pid")
	flag.Parse()
	if o.url != "" {
		o.spawn = 0
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "natsbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.hold {
		if err := hold(ctx, o); err != nil {
			fmt.Fprintln(os.Stderr, "natsbench:", err)
			os.Exit(1)
		}
		return
	}
	var r any
	var err error
	if o.memoryKeys > 0 {
		r, err = runMemory(ctx, o)
	} else {
		r, err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsbench:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "natsbench:", err)
		os.Exit(1)
	}
}

func (o *options) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(o.spawn >= 0, "--spawn must be >= 0, got %d", o.spawn)
	check(o.spawn > 0 || o.url != "", "give --spawn N or --url")
	check(o.spawn >= 2 || o.subscribers >= 1, "--subscribers must be >= 1, got %d", o.subscribers)
	check(o.duration > 0, "--duration must be > 0, got %s", o.duration)
	check(o.warmup >= 0, "--warmup must be >= 0, got %s", o.warmup)
	check(o.drainTimeout > 0 && o.readyTimeout > 0, "--drain-timeout and --ready-timeout must be > 0")
	check(o.rate >= 0, "--rate must be >= 0, got %d", o.rate)
	check(o.batch >= 1, "--batch must be >= 1, got %d", o.batch)
	check(o.payload >= loadkit.SentBytes, "--payload must be >= %d (the send stamp), got %d", loadkit.SentBytes, o.payload)
	check(o.window >= 0, "--window must be >= 0, got %d", o.window)
	check(o.window == 0 || o.rate == 0, "--window is the flow control of --rate 0; a paced run is open loop")
	check(o.kv == "" || o.spawn >= 1, "--kv needs --spawn: the servers are started with JetStream")
	check(o.memoryKeys >= 0 && (o.memoryKeys == 0 || (o.kv != "" && o.spawn >= 1)), "--memory-keys must be >= 0, and only with --kv and --spawn, got %d", o.memoryKeys)
	check(o.settleMax > 0, "--settle-max must be > 0, got %s", o.settleMax)
	check(!o.hold || o.spawn >= 1, "--hold needs --spawn N")
	check(o.watchers >= 0 && (o.watchers == 0 || (o.kv != "" && o.spawn >= 2)), "--watchers must be >= 0, and only with --kv on a cluster (--spawn >= 2), got %d", o.watchers)
	check(o.kvStorage == "file" || o.kvStorage == "memory", "--kv-storage must be file or memory, got %q", o.kvStorage)
	check(o.kv == "" || (o.replicas >= 1 && o.replicas <= max(1, o.spawn)), "--replicas must be 1..--spawn (%d), got %d", o.spawn, o.replicas)
	return errors.Join(errs...)
}

// result has the field names of `sidecar bench --json` (internal/loadgen.Result) for
// every figure both report.
type result struct {
	System      string  `json:"system"`
	Nodes       int     `json:"nodes"`
	Spawned     bool    `json:"spawned"`
	Publishers  int     `json:"publishers"`
	Subscribers int     `json:"subscribers"`
	Rate        int     `json:"rate"`
	Batch       int     `json:"batch"`
	Window      int     `json:"window"`
	Payload     int     `json:"payload"`
	DurationSec float64 `json:"duration_s"`
	WarmupSec   float64 `json:"warmup_s"`

	Submitted       uint64  `json:"submitted"`
	Delivered       uint64  `json:"delivered"`
	SubmitPerSec    float64 `json:"submit_per_sec"`
	DeliveredPerSec float64 `json:"delivered_per_sec"`
	loadkit.Latency
	LatencyFromDue loadkit.Latency `json:"latency_from_due"`
	SendLag        loadkit.Latency `json:"send_lag"`
	LatencyFrom    string          `json:"latency_from"`

	Lost          uint64 `json:"lost"`
	SlowConsumers int64  `json:"slow_consumers"`
	WindowStalls  int64  `json:"window_stalls,omitempty"`
	WrittenOff    int64  `json:"window_written_off,omitempty"`

	NodeCPUSeconds    float64      `json:"node_cpu_seconds,omitempty"`
	NodePeakRSSBytes  int64        `json:"node_peak_rss_bytes,omitempty"`
	CPUUsPerDelivered float64      `json:"cpu_us_per_delivered,omitempty"`
	NodeResults       []nodeResult `json:"node_usage,omitempty"`
	BenchCPUSeconds   float64      `json:"bench_cpu_seconds,omitempty"`
	// KVStorage and Replicas are the --kv bucket's.
	KVStorage string `json:"kv_storage,omitempty"`
	Replicas  int    `json:"replicas,omitempty"`
	// PublishErrors are --kv puts whose acknowledgement was an error (or none came).
	PublishErrors int64 `json:"publish_errors,omitempty"`
}

type nodeResult = loadkit.NodeUsage
