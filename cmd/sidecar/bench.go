package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/fanout/fanout/internal/loadgen"
	"github.com/spf13/cobra"
)

// benchOptions are the flags of `sidecar bench`. Each is also read from FANOUT_<FLAG>.
type benchOptions struct {
	cfg        loadgen.Config
	serveFlags []string
	json       bool
	cpuProfile string
}

func newBenchCmd() *cobra.Command {
	o := benchOptions{cfg: loadgen.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "bench [flags] [-- serve flags]",
		Short: "Load-test a cluster: publish on one node, measure delivery latency on the others",
		Long: `bench publishes events on the first node through pipelined SubmitStream calls and
subscribes on every other node, measuring the latency from send to delivery in an
HdrHistogram. It prints a live line each second and a table at the end (--json: one JSON
line). With --spawn N it starts N 'sidecar serve' processes of this binary on free
loopback ports and stops them at the end; serve flags for them go after '--' or in
--serve-flag. With --app-addrs it drives nodes that are already running.
docs/BENCH.md explains every figure.`,
		Example: `  sidecar bench --spawn 3 --duration 10s --rate 10000
  sidecar bench --rate 0 --window 5000 --json        # saturate, lossless
  sidecar bench --rate 0 --window 5000 --batch 1 --client publisher  # one Go client call per event
  sidecar bench --keys 1000 -- --max-batching-delay=5ms
  sidecar bench --app-addrs 127.0.0.1:7070,127.0.0.1:7080`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return fmt.Errorf("unexpected argument %q: serve flags for spawned nodes go after --", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("app-addrs") && !cmd.Flags().Changed("spawn") {
				o.cfg.Spawn = 0
			}
			o.cfg.ServeFlags = append(append([]string(nil), o.serveFlags...), args...)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, o, cmd)
		},
	}
	o.addFlags(cmd)
	return cmd
}

func (o *benchOptions) addFlags(cmd *cobra.Command) {
	c := &o.cfg
	fs := cmd.Flags()
	fs.IntVar(&c.Spawn, "spawn", c.Spawn, "start this many 'sidecar serve' processes on loopback (ignored when only --app-addrs is given)")
	fs.StringSliceVar(&c.AppAddrs, "app-addrs", nil, "app addresses of running nodes instead of --spawn: the first gets the publishers, every other one a subscriber")
	fs.StringArrayVar(&o.serveFlags, "serve-flag", nil, "an extra serve flag for every spawned node, e.g. --serve-flag=--workers=8; {id} becomes the node's id, e.g. --serve-flag=--data-dir=/var/tmp/bench/{id} (repeatable; or put them after --)")
	fs.IntSliceVar(&c.EnginePIDs, "engine-pid", nil, "process ids whose CPU, peak RSS and TCP connections count in the cluster's figures, e.g. the NATS servers of --transport=jetstream (comma-separated or repeated)")
	fs.StringVar(&c.Client, "client", c.Client, "how the publishers submit: stream (--batch events per SubmitRequest on a pipelined SubmitStream, written from bytes) or publisher (one call per event, as an app would, through the Go client's asynchronous Publisher with its defaults: it packs the puts queued meanwhile into requests; --pipeline does not apply)")
	fs.IntVar(&c.Publishers, "publishers", c.Publishers, "SubmitStream streams on the first node, each on its own connection")
	fs.IntVar(&c.SubscribeBatch, "subscribe-batch", c.SubscribeBatch, "subscribers' max_batch: deliveries a node may pack into one Subscribe message (1: one per message)")
	fs.IntVar(&c.Pipeline, "pipeline", c.Pipeline, "SubmitRequests in flight per stream with --rate 0 (a paced run is open loop: it sends on schedule without waiting for responses)")
	fs.IntVar(&c.Window, "window", c.Window, "with --rate 0: at most this many events sent that some subscriber has not received yet (end-to-end flow control, so that a saturated run does not overrun the nodes and lose events; 0: off; unique keys only)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "measured time, after the warmup")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "time published before the measurement; its events are not measured")
	fs.IntVar(&c.Rate, "rate", c.Rate, "events/s offered across all publishers, open loop (0: as fast as the pipeline and --window let them go)")
	fs.IntVar(&c.Keys, "keys", c.Keys, "distinct task_ids cycled over (0: unique events, a task_id recurring only after 500,000 others, so nothing coalesces and no state table fills); > 0 also measures convergence")
	fs.IntVar(&c.Payload, "payload", c.Payload, "payload bytes per event (the first 16 carry the send time and the due time)")
	fs.IntVar(&c.Batch, "batch", c.Batch, "events per SubmitRequest")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "after the last submit, wait at most this long for the subscribers to catch up")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the bench client's own CPU profile here (the nodes' profiles are on their --pprof-addr: /debug/pprof/profile)")
	fs.BoolVar(&o.json, "json", false, "print one JSON line at the end instead of the table (live lines go to stderr)")
}

// runBench wires the options into loadgen.Run and prints its result.
func runBench(ctx context.Context, o benchOptions, cmd *cobra.Command) error {
	if o.cfg.Spawn > 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--spawn: cannot find this binary: %w", err)
		}
		o.cfg.Binary = exe
	}
	out := cmd.OutOrStdout()
	o.cfg.Live = out
	if o.json {
		o.cfg.Live = cmd.ErrOrStderr()
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	res, err := loadgen.Run(ctx, o.cfg)
	if err != nil {
		return err
	}
	if o.json {
		return res.WriteJSON(out)
	}
	return res.WriteTable(out)
}
