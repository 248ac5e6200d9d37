package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/sidecar"
	"github.com/spf13/cobra"
)

type demoOptions struct {
	nodes    int
	duration time.Duration
	rate     int
	keys     int
	payload  int
	logLevel string
	basePort int // 0: free ports
}

func newDemoCmd() *cobra.Command {
	o := demoOptions{nodes: 3, rate: 3000, keys: 1000, payload: 100, logLevel: "error"}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a local 3-node cluster in this process under a live load, and watch it",
		Long: `demo starts three sidecars in this process on free loopback ports, connects a
subscriber to each, and publishes a steady mixed load (a few hot task_ids that coalesce,
many cold ones) round-robin to all three. Every second it shows, per peer link, the
events sent per second, pending and in-flight, and per node the events delivered per
second. Stop it with Ctrl-C, or give --duration.

--base-port P puts the nodes on known ports instead of free ones: node-a's app on P and
its peer listener on P+1, node-b's on P+2 and P+3, node-c's on P+4 and P+5.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if o.duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, o.duration)
				defer cancel()
			}
			return runDemo(ctx, o, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (0: run until Ctrl-C)")
	fs.IntVar(&o.rate, "rate", o.rate, "events per second offered, across all nodes")
	fs.IntVar(&o.keys, "keys", o.keys, "distinct task_ids")
	fs.IntVar(&o.payload, "payload", o.payload, "payload bytes per event")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "log level of the demo nodes (logs go to stderr)")
	fs.IntVar(&o.basePort, "base-port", 0, "listen on 127.0.0.1 from this port up: node i's app on P+2i, its peers' listener on P+2i+1 (0: free ports)")
	return cmd
}

type demoNode struct {
	sc        *sidecar.Sidecar
	delivered atomic.Uint64
}

func runDemo(ctx context.Context, o demoOptions, out io.Writer) error {
	if o.rate <= 0 || o.keys <= 0 || o.payload < 0 {
		return errors.New("--rate and --keys must be > 0, --payload >= 0")
	}
	if o.basePort < 0 || o.basePort+2*o.nodes-1 > 65535 {
		return fmt.Errorf("--base-port %d: want 0 (free ports) or 1 to %d (the demo takes %d ports from it)", o.basePort, 65535-2*o.nodes+1, 2*o.nodes)
	}
	level, err := parseLevel(o.logLevel)
	if err != nil {
		return err
	}
	log, err := newLogger("auto", level, os.Stderr)
	if err != nil {
		return err
	}
	nodes, err := startDemoCluster(o.nodes, o.basePort, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, n := range nodes {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n.sc.Shutdown(sctx) //nolint:errcheck // the demo is over; Shutdown logged the drain
			cancel()
		}
	}()
	intro := demoIntro(nodes)
	io.WriteString(out, intro)

	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); subscribeCount(wctx, n) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); publish(wctx, nodes, o) }()
	watch(ctx, nodes, out, intro)
	return nil
}

// startDemoCluster binds every listener first (port 0, or from basePort: node i's app
// on basePort+2i, its peer listener on basePort+2i+1), so each node knows the others'
// peer addresses before any starts. On failure it closes whatever it opened.
func startDemoCluster(n, basePort int, log *slog.Logger) (nodes []*demoNode, err error) {
	// The app and peer listeners not yet owned by a sidecar (nil once they are).
	appLis, peerLis := make([]net.Listener, n), make([]net.Listener, n)
	defer func() {
		if err == nil {
			return
		}
		for _, l := range append(appLis, peerLis...) {
			if l != nil {
				l.Close()
			}
		}
		for _, dn := range nodes {
			if dn != nil {
				dn.sc.Shutdown(context.Background()) //nolint:errcheck // the start failed; its error is the one to report
			}
		}
		nodes = nil
	}()
	for i := range n {
		for j, l := range []*net.Listener{&appLis[i], &peerLis[i]} {
			addr := "127.0.0.1:0"
			if basePort > 0 {
				addr = fmt.Sprintf("127.0.0.1:%d", basePort+2*i+j)
			}
			if *l, err = net.Listen("tcp", addr); err != nil {
				return nil, fmt.Errorf("--base-port %d: %w (pick another, or 0 for free ports)", basePort, err)
			}
		}
	}
	peerAddrs := make([]string, n)
	for i, l := range peerLis {
		peerAddrs[i] = l.Addr().String()
	}
	nodes = make([]*demoNode, n)
	for i := range n {
		cfg := demoConfig(fmt.Sprintf("node-%c", 'a'+i), log)
		for j := range n {
			if j != i {
				cfg.Mesh.Peers = append(cfg.Mesh.Peers, peerAddrs[j])
			}
		}
		cfg.AppListener, cfg.PeerListener = appLis[i], peerLis[i]
		appLis[i], peerLis[i] = nil, nil // owned by the sidecar now, even if it fails
		sc, err := sidecar.Start(context.Background(), cfg)
		if err != nil {
			return nodes, err
		}
		nodes[i] = &demoNode{sc: sc}
	}
	return nodes, nil
}

// demoConfig is one demo node's Config, its listeners left for the caller to give: no
// admin listener, the process's memory limit left alone (MemoryLimit's zero value),
// and the node's own pending budget (fanout.DefaultConfig's).
func demoConfig(id string, log *slog.Logger) sidecar.Config {
	cfg := sidecar.DefaultConfig()
	cfg.Node = fanout.DefaultConfig()
	cfg.Node.NodeID = id
	cfg.AdminAddr = ""
	cfg.Build = sidecarBuild()
	cfg.Logger = log.With("node", id)
	return cfg
}

// demoIntro names the nodes and how to look at them. Every frame of the live view
// repeats it, so the addresses stay on screen.
func demoIntro(nodes []*demoNode) string {
	var b strings.Builder
	fmt.Fprintln(&b, "fanout demo: a 3-node cluster in this process (Ctrl-C stops it)")
	for _, n := range nodes {
		fmt.Fprintf(&b, "  %s  app %s  peer %s\n", n.sc.Node().ID(), n.sc.AppAddr(), n.sc.PeerAddr())
	}
	a, c := nodes[0].sc.AppAddr(), nodes[len(nodes)-1].sc.AppAddr()
	fmt.Fprintf(&b, "In another terminal:  bin/sidecar status --addr %s\n", a)
	fmt.Fprintf(&b, "                      bin/sidecar watch --addr %s demo/mine\n", c)
	fmt.Fprintf(&b, "                      bin/sidecar put --addr %s demo/mine '{\"hello\":1}'\n\n", a)
	return b.String()
}

// subscribeCount reads a node's Subscribe stream, like a local app would, and counts.
func subscribeCount(ctx context.Context, n *demoNode) {
	cc, err := dialApp(n.sc.AppAddr())
	if err != nil {
		return
	}
	defer cc.Close()
	stream, err := fanoutv1.NewFanoutServiceClient(cc).Subscribe(ctx, &fanoutv1.SubscribeRequest{})
	if err != nil {
		return
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return
		}
		n.delivered.Add(1)
	}
}

// publish offers o.rate events/s in 10 ms ticks, round-robin over the nodes. A fifth of
// the task_ids are hot and take four fifths of the updates, so coalescing shows.
func publish(ctx context.Context, nodes []*demoNode, o demoOptions) {
	clients := make([]fanoutv1.FanoutServiceClient, len(nodes))
	for i, n := range nodes {
		cc, err := dialApp(n.sc.AppAddr())
		if err != nil {
			return
		}
		defer cc.Close()
		clients[i] = fanoutv1.NewFanoutServiceClient(cc)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	payload := make([]byte, o.payload)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var carry float64
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		carry += float64(o.rate) / 100
		count := int(carry)
		carry -= float64(count)
		req := &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, count)}
		for k := range req.Events {
			req.Events[k] = &fanoutv1.Event{TaskId: demoKey(rng, o.keys), Payload: payload}
		}
		if _, err := clients[i%len(clients)].Submit(ctx, req); err != nil && ctx.Err() == nil && !pastDeadline(ctx) {
			fmt.Fprintln(os.Stderr, "submit:", err)
		}
	}
}

// pastDeadline reports whether ctx's deadline has passed: gRPC's own timer can end a
// call with DEADLINE_EXCEEDED a moment before ctx.Err() says so (--duration's end).
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

func demoKey(rng *rand.Rand, keys int) string {
	hot := max(1, keys/5)
	if rng.IntN(5) < 4 {
		return fmt.Sprintf("demo/hot-%d", rng.IntN(hot))
	}
	return fmt.Sprintf("demo/key-%d", rng.IntN(keys))
}

// watch redraws the view every second until ctx is done.
func watch(ctx context.Context, nodes []*demoNode, out io.Writer, intro string) {
	tty := isTerminal(out)
	prevSent := make(map[string]uint64)
	prevDelivered := make([]uint64, len(nodes))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "demo stopped")
			return
		case <-tick.C:
		}
		var b strings.Builder
		if tty {
			b.WriteString("\033[H\033[2J")
			b.WriteString(intro) // the clear took it off the screen
		}
		fmt.Fprintf(&b, "t=%s\n", time.Since(start).Round(time.Second))
		renderDemo(&b, nodes, prevSent, prevDelivered)
		io.WriteString(out, b.String())
	}
}

func renderDemo(w io.Writer, nodes []*demoNode, prevSent map[string]uint64, prevDelivered []uint64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "LINK\tSENT/S\tPENDING\tIN-FLIGHT\tOVERRIDDEN\tRETRIED\t")
	statuses := make([]*fanoutv1.GetStatusResponse, len(nodes))
	for i, n := range nodes {
		st := n.sc.Node().Status()
		statuses[i] = st
		for _, p := range st.GetPeers() {
			key := st.GetNodeId() + "→" + p.GetAddress()
			peer := p.GetNodeId()
			if peer == "" {
				peer = p.GetAddress()
			}
			done := p.GetSucceeded() + p.GetStale()
			fmt.Fprintf(tw, "%s → %s\t%d\t%d\t%d\t%d\t%d\t\n", st.GetNodeId(), peer, done-prevSent[key],
				p.GetPending(), p.GetInFlight(), p.GetOverridden(), p.GetReplayed())
			prevSent[key] = done
		}
	}
	fmt.Fprintln(tw, "\t\t\t\t\t\t")
	fmt.Fprintln(tw, "NODE\tDELIVERED/S\tKEYS\t\t\t\t")
	for i, n := range nodes {
		d := n.delivered.Load()
		fmt.Fprintf(tw, "%s\t%d\t%d\t\t\t\t\n", n.sc.Node().ID(), d-prevDelivered[i], statuses[i].GetState().GetKeys())
		prevDelivered[i] = d
	}
	tw.Flush()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
