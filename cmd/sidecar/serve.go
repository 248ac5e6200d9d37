package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/fanout/fanout/internal/earlysignal"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/sidecar"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// serveOptions are the flags of `sidecar serve`. Each is also read from FANOUT_<FLAG>.
// Most go straight into the assembly's Config; the rest are parsed into it (peers,
// memoryLimit, appSocketMode) or are the process's own (logLevel, gomaxprocs).
type serveOptions struct {
	cfg           sidecar.Config
	peers         string
	logLevel      string
	logFormat     string // --log-format: auto, json or text
	gomaxprocs    int
	memoryLimit   string // --memory-limit, parsed into cfg.MemoryLimit by serve
	appSocketMode string // --app-socket-mode, octal
}

func defaultServeOptions() serveOptions {
	cfg := sidecar.DefaultConfig()
	return serveOptions{
		cfg:           cfg,
		logLevel:      "info",
		logFormat:     "auto",
		gomaxprocs:    1,
		memoryLimit:   "auto",
		appSocketMode: fmt.Sprintf("%04o", cfg.AppSocketMode), // 0600
	}
}

// addFlags registers the flags of serve on fs. The usage text gives each default's
// reason; docs/CLI.md (make docs) lists them all.
func (o *serveOptions) addFlags(fs *pflag.FlagSet) {
	c, m := &o.cfg.Node, &o.cfg.Mesh
	fs.StringVar(&c.NodeID, "node-id", c.NodeID, "this sidecar's id (default: the hostname, which is the pod name on Kubernetes)")
	fs.StringVar(&o.cfg.AppAddr, "app-addr", o.cfg.AppAddr, "FanoutService listener for the local app: host:port or unix:///path (loopback by default: only the local app may submit)")
	fs.StringVar(&o.cfg.PeerAddr, "peer-addr", o.cfg.PeerAddr, "PeerService listener for the other sidecars (all interfaces: peers are on other hosts)")
	fs.StringVar(&o.cfg.AdminAddr, "admin-addr", o.cfg.AdminAddr, "HTTP /metrics, /healthz (liveness), /readyz (readiness) and gRPC health on the same port, for Prometheus and the kubelet's probes (all interfaces: they come from outside the pod; it serves nothing else); empty disables")
	fs.StringVar(&o.cfg.PprofAddr, "pprof-addr", o.cfg.PprofAddr, "serve Go's profiles (/debug/pprof/) here, e.g. 127.0.0.1:6060 (empty: off; profiles and the command line are not for the network, keep it on loopback)")
	fs.StringVar(&o.cfg.DataDir, "data-dir", o.cfg.DataDir, "keep the state table, the clock and the node id in this directory (pebble, fsynced): a restart resumes from it, and Submit answers once events are on disk (empty: memory only; peers still bootstrap the node)")
	fs.Int64Var(&o.cfg.DataDirMinFreeBytes, "data-dir-min-free-bytes", o.cfg.DataDirMinFreeBytes, "with --data-dir: below this much free space on its file system, commits are refused (Submit answers UNAVAILABLE, the node is not ready: \"disk full\") before the store sees ENOSPC, and resume by themselves once there is room (64 MiB: a commit, a memtable flush, compactions and a new MANIFEST; 0: no floor)")
	fs.StringVar(&o.peers, "peers", o.peers, "comma-separated peer addresses host:port (their --peer-addr); this node's own address is detected and dropped")
	fs.DurationVar(&m.PeerRemovalGrace, "peer-removal-grace", m.PeerRemovalGrace, "a peer that leaves the peer set (DNS no longer names it) is still sent what it has pending for this long, then the rest is dropped; named again before then, it is back with nothing lost (one --peers-refresh: a DNS answer that briefly leaves a pod out loses nothing)")
	fs.DurationVar(&o.cfg.ShutdownTimeout, "shutdown-timeout", o.cfg.ShutdownTimeout, "on SIGTERM, keep sending queued events for at most this long (10s fits in Kubernetes' default 30s grace period)")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", o.logFormat, "json (one object a line, for a log collector), text (key=value, for people) or auto: text when stderr is a terminal, else json")
	fs.IntVar(&o.gomaxprocs, "gomaxprocs", o.gomaxprocs, "OS threads running Go code at once (1: a sidecar shares its pod's CPU with the app, and one keeps Go's scheduler from spinning idle threads: CPU per event at 10k events/s 33-37 instead of 41-44 µs, docs/BENCHMARKS.md; with --data-dir 2, so that the store's flushes and compactions do not take turns with the serving path; 0: Go's default, every CPU or the cgroup limit; the GOMAXPROCS variable applies when this flag is not given)")
	fs.StringVar(&o.memoryLimit, "memory-limit", o.memoryLimit, "Go's soft heap limit, e.g. 240MiB: the GC works harder as the heap nears it instead of letting it grow to twice its live size (auto: GOMEMLIMIT if set, else 90% of the container's cgroup limit, else none; off: none)")
	b := &m.Batcher
	fs.IntVar(&b.MaxBuffer, "max-buffer", b.MaxBuffer, "pending events per peer before the oldest is evicted (Eureka's maxElementsInPeerReplicationPool)")
	fs.IntVar(&b.MaxBatch, "max-batch", b.MaxBatch, "events per Replicate call (Eureka's BATCH_SIZE)")
	fs.DurationVar(&b.MaxBatchingDelay, "max-batching-delay", b.MaxBatchingDelay, "how long the oldest event may wait for a fuller batch (0: send at once; Eureka uses 500ms)")
	fs.DurationVar(&b.IdleFlush, "batch-idle-flush", b.IdleFlush, "with --max-batching-delay > 0: send a waiting batch early once no new event has arrived for this long (0: off; Eureka has no such rule)")
	fs.IntVar(&b.Workers, "workers", b.Workers, "batches in flight per peer (on the replicate stream, or as concurrent Replicate calls)")
	fs.DurationVar(&o.cfg.AnswerHold, "answer-hold", o.cfg.AnswerHold, "how long a peer may hold the answer to a batch no Submit waits for (ack LOCAL or QUEUED) on the replicate stream, to answer several in one message (delivery is not delayed; the batch's outcome is); 0: answer every batch at once; at most 100ms")
	fs.BoolVar(&o.cfg.ReplicateStream, "replicate-stream", o.cfg.ReplicateStream, "send every peer's batches on one long-lived ReplicateStream (no per-call headers and stream setup; docs/BENCHMARKS.md); false: one unary Replicate call per batch, as sidecars before API v1.1 do (a peer without the stream is sent unary calls anyway)")
	fs.DurationVar(&b.CongestionRetryDelay, "congestion-retry-delay", b.CongestionRetryDelay, "pause a peer after it said it is overloaded (RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED or BUSY): it may recover in a moment")
	fs.DurationVar(&b.NetworkFailureRetryDelay, "network-failure-retry-delay", b.NetworkFailureRetryDelay, "pause a peer after it could not be reached: longer than the congestion pause, since a dead peer takes longer to come back")
	fs.DurationVar(&c.TaskTTL, "task-ttl", c.TaskTTL, "drop an event not sent within this long, if it sets no ttl (0: never; Eureka uses 30s)")
	fs.DurationVar(&m.ReplicateTimeout, "replicate-timeout", m.ReplicateTimeout, "deadline of one Replicate call, and of each anti-entropy call (Digest, Push, and the wait for each message of a Pull); a slower peer counts as congested (an anti-entropy call past it fails that round with the peer alone, which a later interval retries)")
	fs.IntVar(&c.State.MaxKeys, "state-max-keys", c.State.MaxKeys, "keys the state table holds, deleted ones not included; at the bound a new key is refused (REFUSED to the app, BUSY to peers) and counted; peers' writes add keys only up to 90% of it, the rest is kept for this node's app")
	fs.IntVar(&c.State.MaxTombstones, "state-max-tombstones", c.State.MaxTombstones, "deleted keys the state table remembers (for --tombstone-ttl); at the bound the oldest are forgotten early, and counted, so a delete is never refused")
	fs.Int64Var(&c.State.MaxTombstoneBytes, "state-max-tombstone-bytes", c.State.MaxTombstoneBytes, "event bytes of the deleted keys the state table remembers; at the bound the oldest are forgotten early, as at --state-max-tombstones")
	fs.Int64Var(&c.State.MaxBytes, "state-max-bytes", c.State.MaxBytes, "event bytes the state table holds; at the bound a write that would grow it is refused and counted (the table's own overhead is ~105 bytes per key on top, docs/BENCHMARKS.md)")
	fs.DurationVar(&c.State.TombstoneTTL, "tombstone-ttl", c.State.TombstoneTTL, "how long a deleted key is remembered; a write older than the delete that arrives later than this brings the key back")
	fs.DurationVar(&m.AntiEntropyInterval, "anti-entropy-interval", m.AntiEntropyInterval, "compare the state table with one peer, in turn, this often (±25%) and repair both; a round in sync costs ~150 bytes (0: off; bootstrap still runs)")
	fs.DurationVar(&m.SyncTimeout, "sync-timeout", m.SyncTimeout, "at start, report the health service fanout.v1.FanoutService NOT_SERVING until the first sync with the reachable peers ends, or this long")
	fs.Uint32Var(&m.Breaker.Failures, "breaker-failures", m.Breaker.Failures, "consecutive network failures that open a peer's circuit breaker")
	fs.DurationVar(&m.Breaker.OpenFor, "breaker-open", m.Breaker.OpenFor, "how long an open breaker holds a peer's events before probing")
	fs.Uint32Var(&m.Breaker.Probes, "breaker-probes", m.Breaker.Probes, "batches a half-open breaker lets through as probes; all must succeed to close it")
	fs.IntVar(&c.Limits.MaxEventBytes, "max-event-bytes", c.Limits.MaxEventBytes, "largest payload of one event")
	addLimitFlags(fs, c, m)
	addSecurityFlags(fs, &o.cfg, &o.appSocketMode)
	addDiscoveryFlags(fs, &o.cfg.Discovery)
	addTransportFlags(fs, &o.cfg)
}

func newServeCmd() *cobra.Command {
	o := defaultServeOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the sidecar",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// SIGTERM and SIGINT are caught before anything else: a signal that comes
			// while the node starts (a data dir to load, a DNS server that does not
			// answer) ends it cleanly, with exit code 0, once the start-up is done or
			// cut short. Before this line the early catch had them, from the first
			// milliseconds of the packages' initialisation on: one that came then
			// stops the node as soon as it has started.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if earlysignal.Handover() != nil {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			if err := refuseMeshFlags(cmd.Flags(), o.cfg.Transport); err != nil {
				return err
			}
			if o.cfg.DataDir != "" && !cmd.Flags().Changed("gomaxprocs") {
				// The store's flushes and compactions need a thread beside the serving
				// path: on one, they took turns with it (p99 at 10,000/s 216 ms → 14 ms).
				o.gomaxprocs = 2
			}
			if err := setProcs(o.gomaxprocs, cmd.Flags().Changed("gomaxprocs"), os.Getenv("GOMAXPROCS")); err != nil {
				return err
			}
			limit, err := parseMemoryLimit(o.memoryLimit)
			if err != nil {
				return err
			}
			o.cfg.MemoryLimit = limit // set by the assembly, first
			o.cfg.NodeIDGiven = cmd.Flags().Changed("node-id")
			return runServe(ctx, o)
		},
	}
	o.addFlags(cmd.Flags())
	cmd.SetUsageFunc(groupedUsage(serveFlagGroups()))
	return cmd
}

// setProcs applies --gomaxprocs: n > 0 sets it, 0 keeps Go's default. Go's own
// GOMAXPROCS variable wins over the flag's default, not over the flag itself.
func setProcs(n int, flagGiven bool, env string) error {
	switch {
	case n < 0:
		return fmt.Errorf("--gomaxprocs %d: want 0 (Go's default) or a positive number of threads", n)
	case env != "" && !flagGiven, n == 0:
		return nil
	}
	runtime.GOMAXPROCS(n)
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(s))); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// newLogger is the logger of --log-format at --log-level, writing to w.
func newLogger(format string, level slog.Level, w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(format) {
	case "auto":
		if isTerminal(w) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json, text or auto (text on a terminal, else json)", format)
}

// runServe starts one sidecar (pkg/sidecar) and blocks until ctx is done, then shuts
// down gracefully. An error that names a Config field names its flag instead.
func runServe(ctx context.Context, o serveOptions) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	return forFlags(sidecar.Run(ctx, cfg))
}

// config is the assembly's Config from the flags that need parsing beyond pflag's.
func (o serveOptions) config() (sidecar.Config, error) {
	cfg := o.cfg
	level, err := parseLevel(o.logLevel)
	if err != nil {
		return cfg, err
	}
	// Signals are caught from the start-up's first log line on.
	if cfg.Logger, err = newLogger(o.logFormat, level, os.Stderr); err != nil {
		return cfg, err
	}
	cfg.Build = sidecarBuild()
	if cfg.Mesh.Peers, err = peers.ParseList(o.peers); err != nil {
		return cfg, err
	}
	if cfg.AppSocketMode, err = socketMode(o.appSocketMode); err != nil {
		return cfg, err
	}
	return cfg, nil
}
