package loadgen

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Config configures one bench run. Run copies it; change nothing after. The error
// messages of validate name the `sidecar bench` flags, which mirror these fields.
type Config struct {
	// Spawn is how many `sidecar serve` processes to start (--spawn). 0 drives the
	// running nodes of AppAddrs instead. 3: the smallest cluster where one origin fans
	// out to more than one peer.
	Spawn int
	// Binary is the sidecar executable to spawn; the command passes os.Executable().
	Binary string
	// ServeFlags are extra `serve` flags for every spawned node (after `--`, or
	// --serve-flag), e.g. "--workers=8". The bench sets the addresses, --node-id and
	// --peers itself.
	ServeFlags []string
	// AppAddrs are the app addresses of running nodes (--app-addrs). The first gets the
	// publishers; every other one gets a subscriber.
	AppAddrs []string
	// EnginePIDs are processes the cluster's events also go through, not started by
	// the bench: the NATS servers of --transport=jetstream (--engine-pid). Their CPU is
	// sampled over the same window as the nodes', and their peak RSS and established
	// TCP connections at its end, so that a run's CPU is the whole cluster's.
	EnginePIDs []int

	// Client is how the publishers submit (--client): ClientStream (the default) writes
	// --batch events per SubmitRequest on a pipelined SubmitStream, from bytes;
	// ClientPublisher makes one call per event, as an app would, through the Go
	// client's asynchronous Publisher (pkg/client, its defaults), which packs the
	// puts queued meanwhile into requests.
	Client string

	// Publishers is the number of SubmitStream streams on the first node. 1: one
	// pipelined stream already outruns a 2-core cluster.
	Publishers int
	// SubscribeBatch is the subscribers' SubscribeRequest.max_batch (--subscribe-batch):
	// how many waiting deliveries a node may pack into one message. 256: what a
	// high-throughput app asks for, and what a NATS client does by reading whole socket
	// buffers; it costs nothing at low rates (a node packs only what is already waiting).
	// 1 measures the plain one-event-per-message stream.
	SubscribeBatch int
	// Pipeline is how many SubmitRequests one stream keeps in flight with --rate 0
	// (--pipeline). 16: enough to hide a loopback round trip at the default batch. A
	// paced run is open loop: it sends on the schedule without waiting for responses,
	// so the bound does not apply.
	Pipeline int
	// Window is the end-to-end flow control of a run with --rate 0 (--window): at
	// most this many events sent that some subscriber has not received yet, over all
	// publishers (bench/loadkit.Window). It keeps a saturated publisher from overrunning
	// the nodes' per-peer buffers (--max-buffer), which would evict, i.e. lose, events.
	// 0: off (only the pipeline bounds the publisher). Unique keys only: coalesced
	// events never arrive.
	Window int
	// Duration is the measured time (--duration). It follows the warmup. 10s: long
	// enough for a stable p99 at 10k events/s, short enough for a shared machine.
	Duration time.Duration
	// Warmup is published before the measurement and not measured (--warmup). 1s:
	// connections, HTTP/2 windows and the Go heap settle.
	Warmup time.Duration
	// Rate is the events/s offered across all publishers, open loop (--rate). 0 sends
	// as fast as the pipeline and the window let requests go. 10000: a load a 2-core machine carries
	// without saturating, so the latency measured is the sidecar's, not a queue's.
	Rate int
	// Keys is the number of distinct task_ids (--keys). 0 makes events unique within a
	// window of 500,000 task_ids (no coalescing; a node's state table never fills);
	// > 0 cycles over that many hot keys and measures convergence.
	Keys int
	// Payload is the payload size in bytes (--payload). The first 8 bytes carry the
	// send time when Payload >= 8. 100: a small state update.
	Payload int
	// Batch is the number of events per SubmitRequest (--batch). 10: amortises the
	// per-request cost without hiding per-event latency.
	Batch int
	// DrainTimeout bounds the wait, after the last submit, for subscribers to catch up
	// (--drain-timeout). 10s.
	DrainTimeout time.Duration

	// ReadyTimeout bounds a spawned node's start, from exec to health SERVING. 15s:
	// generous for a loaded 2-core machine.
	ReadyTimeout time.Duration
	// StopTimeout bounds a spawned node's exit after SIGTERM before it is killed. 15s:
	// the serve default --shutdown-timeout (10s) plus slack.
	StopTimeout time.Duration
	// Interval is the period of the live line. 1s.
	Interval time.Duration
	// Live receives one line per Interval; nil prints nothing.
	Live io.Writer
	// Prefix starts every task_id of the run, so that a subscriber sees only this
	// run's events. Default: "bench/<start time in hex>/".
	Prefix string
	// Now reads the clock. Default time.Now. Latency arithmetic uses its monotonic
	// reading.
	Now func() time.Time
}

// The values of Config.Client.
const (
	ClientStream    = "stream"
	ClientPublisher = "publisher"
)

// DefaultConfig returns the defaults of `sidecar bench`; the reason for each is on its
// field.
func DefaultConfig() Config {
	return Config{
		Spawn:      3,
		Client:     ClientStream,
		Publishers: 1,
		// 1 by default: measure the plain stream every app gets unless it opts in.
		SubscribeBatch: 256,
		Pipeline:       16,
		Duration:       10 * time.Second,
		Warmup:         time.Second,
		Rate:           10000,
		Payload:        100,
		Batch:          10,
		DrainTimeout:   10 * time.Second,
		ReadyTimeout:   15 * time.Second,
		StopTimeout:    15 * time.Second,
		Interval:       time.Second,
	}
}

// maxBatch is the node's limit of events per request (10,000).
const maxBatch = 10000

// reservedServeFlags are set by the bench on every spawned node.
var reservedServeFlags = []string{"--app-addr", "--peer-addr", "--admin-addr", "--node-id", "--peers"}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.Spawn >= 0, "--spawn must be >= 0, got %d", c.Spawn)
	check(c.Spawn == 0 || len(c.AppAddrs) == 0, "--spawn and --app-addrs: give one, not both")
	check(c.Spawn != 1, "--spawn must be >= 2: one node to publish on and at least one to subscribe on")
	check(c.Spawn > 0 || len(c.AppAddrs) != 1, "--app-addrs needs at least 2 addresses: the first to publish on, the others to subscribe on")
	check(c.Spawn > 0 || len(c.AppAddrs) > 0, "give --spawn N or --app-addrs a,b,...")
	check(c.Spawn == 0 || c.Binary != "", "loadgen: Config.Binary is required with --spawn")
	check(c.Client == ClientStream || c.Client == ClientPublisher, "--client must be %s or %s, got %q", ClientStream, ClientPublisher, c.Client)
	check(c.Publishers >= 1, "--publishers must be >= 1, got %d", c.Publishers)
	check(c.SubscribeBatch >= 1 && c.SubscribeBatch <= maxBatch, "--subscribe-batch must be 1..%d, got %d", maxBatch, c.SubscribeBatch)
	check(c.Pipeline >= 1, "--pipeline must be >= 1, got %d", c.Pipeline)
	check(c.Window >= 0, "--window must be >= 0, got %d", c.Window)
	check(c.Window == 0 || c.Rate == 0, "--window is the flow control of --rate 0; a paced run is open loop")
	check(c.Window == 0 || c.Keys == 0, "--window needs unique keys (--keys 0): coalesced events never arrive, so the window would never open")
	check(c.Duration > 0, "--duration must be > 0, got %s", c.Duration)
	check(c.Warmup >= 0, "--warmup must be >= 0, got %s", c.Warmup)
	check(c.Rate >= 0, "--rate must be >= 0, got %d", c.Rate)
	check(c.Keys >= 0, "--keys must be >= 0, got %d", c.Keys)
	for _, pid := range c.EnginePIDs {
		check(pid > 0, "--engine-pid must be a process id > 0, got %d", pid)
	}
	check(c.Payload >= 0, "--payload must be >= 0, got %d", c.Payload)
	check(c.Batch >= 1 && c.Batch <= maxBatch, "--batch must be between 1 and %d, got %d", maxBatch, c.Batch)
	check(c.DrainTimeout > 0, "--drain-timeout must be > 0, got %s", c.DrainTimeout)
	check(c.ReadyTimeout > 0 && c.StopTimeout > 0 && c.Interval > 0, "loadgen: ReadyTimeout, StopTimeout and Interval must be > 0")
	for _, a := range c.AppAddrs {
		check(a != "", "--app-addrs: empty address in %q", strings.Join(c.AppAddrs, ","))
	}
	for _, f := range c.ServeFlags {
		check(!isReserved(f), "serve flag %q: bench sets it on every spawned node", f)
	}
	return errors.Join(errs...)
}

func isReserved(flag string) bool {
	name, _, _ := strings.Cut(flag, "=")
	for _, r := range reservedServeFlags {
		if name == r {
			return true
		}
	}
	return false
}

func (c *Config) fillDefaults() {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Prefix == "" {
		c.Prefix = fmt.Sprintf("bench/%x/", c.Now().UnixNano())
	}
}
