package loadgen

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/client"
	"google.golang.org/grpc"
)

// Timing of the parts of a run that are not flags.
const (
	subscribeTimeout = 10 * time.Second       // until every Subscribe stream is registered
	statusTimeout    = 2 * time.Second        // one GetStatus call
	drainPoll        = 10 * time.Millisecond  // convergence and catch-up checks
	quietFor         = 500 * time.Millisecond // no arrivals and an empty origin: give up waiting
)

// Run spawns or connects to the nodes, publishes for cfg.Warmup+cfg.Duration, waits
// for the subscribers to catch up, and returns what it measured. When ctx is done
// early (Ctrl-C) it stops at once and returns the partial Result with Interrupted set.
// Every goroutine and process it started has ended when it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	addrs := cfg.AppAddrs
	var cl *cluster
	if cfg.Spawn > 0 {
		var err error
		if cl, err = startCluster(ctx, &cfg); err != nil {
			return nil, err
		}
		defer cl.stop(cfg.StopTimeout) // on an early return; stop is idempotent
		addrs = cl.appAddrs()
	}
	b, err := newBench(&cfg, addrs)
	if err != nil {
		return nil, err
	}
	defer b.close()
	return b.run(ctx, cl)
}

// bench is one run against a set of nodes. Run's goroutine owns it; the goroutines it
// starts (subscribers, publishers, the live reporter) share only the clock, the
// atomics and the recorders.
type bench struct {
	cfg    *Config
	addrs  []string
	conns  []*grpc.ClientConn // one per node, plus one per publisher at the end
	apps   []*client.Client   // --client publisher: one per publisher
	first  fanoutv1.FanoutServiceClient
	clock  clock
	latest keyVersions     // nil without hot keys
	window *loadkit.Window // nil without flow control
	subs   []*subscriber
	pubs   []*publisher
	win    window
}

func newBench(cfg *Config, addrs []string) (*bench, error) {
	b := &bench{cfg: cfg, addrs: addrs, clock: clock{now: cfg.Now, epoch: cfg.Now()}}
	if cfg.Keys > 0 {
		b.latest = make(keyVersions, cfg.Keys)
	}
	conns := make([]*grpc.ClientConn, len(addrs))
	for i, a := range addrs {
		cc, err := b.dial(a)
		if err != nil {
			b.close()
			return nil, err
		}
		conns[i] = cc
	}
	b.first = fanoutv1.NewFanoutServiceClient(conns[0])
	b.window = loadkit.NewWindow(int64(cfg.Window), len(addrs)-1, 0)
	for i, cc := range conns[1:] {
		b.subs = append(b.subs, &subscriber{index: i, addr: addrs[i+1], client: fanoutv1.NewFanoutServiceClient(cc), cc: cc, cfg: cfg, clock: b.clock, rec: newRecorder(), window: b.window})
	}
	return b, nil
}

func (b *bench) dial(addr string) (*grpc.ClientConn, error) {
	cc, err := dialApp(addr)
	if err == nil {
		b.conns = append(b.conns, cc)
	}
	return cc, err
}

func (b *bench) close() {
	for _, cc := range b.conns {
		cc.Close()
	}
	for _, c := range b.apps {
		c.Close()
	}
}

// run is the whole measurement; see doc.go for its phases.
func (b *bench) run(ctx context.Context, cl *cluster) (*Result, error) {
	base, err := b.status(ctx)
	if err != nil {
		return nil, err
	}
	subCtx, stopSubs := context.WithCancel(ctx)
	var subWG sync.WaitGroup
	subErrs := make(chan error, len(b.subs))
	defer func() { stopSubs(); subWG.Wait() }()
	if err := b.startSubscribers(subCtx, &subWG, subErrs); err != nil {
		return nil, err
	}
	start := b.clock.since()
	b.win = window{start: start, measureFrom: start + b.cfg.Warmup, end: start + b.cfg.Warmup + b.cfg.Duration}
	for _, s := range b.subs {
		s.measureFrom.Store(int64(b.win.measureFrom))
	}
	if err := b.makePublishers(); err != nil {
		return nil, err
	}
	m := measurement{}
	runErr := b.publishAndDrain(ctx, cl, &m, subErrs)
	if runErr != nil && ctx.Err() == nil {
		return nil, runErr
	}
	m.interrupted = ctx.Err() != nil
	final, err := b.status(context.WithoutCancel(ctx))
	if err != nil && !m.interrupted {
		return nil, err
	}
	stopSubs()
	subWG.Wait()
	if m.base == nil {
		m.base = base
	}
	res := b.result(countersOf(m.base), countersOf(final), &m)
	if cl != nil {
		cl.stop(b.cfg.StopTimeout)
		addUsage(res, cl, m.cpu0, m.cpu1)
		for i := range res.NodeResults {
			if i < len(m.conns) {
				res.NodeResults[i].TCPConns = m.conns[i]
			}
		}
	}
	res.EngineResults, res.EngineCPUSeconds = m.engine.usage()
	return res, nil
}

// measurement collects what publishAndDrain observed beyond the counters.
type measurement struct {
	lastSend     time.Duration // offset of the last Send of any publisher
	converged    bool
	convergeAt   time.Duration               // arrival of the last latest version (hot keys)
	drainedAt    time.Duration               // when the drain ended
	base         *fanoutv1.GetStatusResponse // the first node at the start of the measured window
	cpu0, cpu1   []time.Duration             // the spawned nodes' CPU at the start and the end
	self0, self1 time.Duration               // the bench's own CPU at the start and the end
	conns        []*int                      // the spawned nodes' TCP connections at the end
	engine       engine                      // the --engine-pid processes
	interrupted  bool
}

// startSubscribers opens a Subscribe stream on every node but the first, and waits
// until each node counts one more subscriber than before.
func (b *bench) startSubscribers(ctx context.Context, wg *sync.WaitGroup, errs chan error) error {
	before := make([]uint64, len(b.subs))
	for i, s := range b.subs {
		st, err := statusOf(ctx, s.client, s.addr)
		if err != nil {
			return err
		}
		s.nodeID, before[i] = st.GetNodeId(), st.GetSubscribers()
		if b.cfg.Keys > 0 {
			s.keys = make([]keyState, b.cfg.Keys)
		}
	}
	for _, s := range b.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	return b.waitSubscribed(ctx, before, errs)
}

func (b *bench) waitSubscribed(ctx context.Context, before []uint64, errs <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for i := 0; i < len(b.subs); {
		st, err := statusOf(ctx, b.subs[i].client, b.subs[i].addr)
		if err == nil && st.GetSubscribers() > before[i] {
			i++
			continue
		}
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("subscriber on %s not registered: %w", b.subs[i].addr, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

func (b *bench) makePublishers() error {
	for i := range b.cfg.Publishers {
		if b.cfg.Client == ClientPublisher { // the Go client's own connection, as an app has
			c, err := client.Dial(b.addrs[0])
			if err != nil {
				return err
			}
			b.apps = append(b.apps, c)
			p := newPublisher(i, b.cfg, nil, b.clock, b.win, b.latest, b.window)
			p.app = c
			b.pubs = append(b.pubs, p)
			continue
		}
		cc, err := b.dial(b.addrs[0]) // a connection each: one HTTP/2 connection would serialise them
		if err != nil {
			return err
		}
		b.pubs = append(b.pubs, newPublisher(i, b.cfg, fanoutv1.NewFanoutServiceClient(cc), b.clock, b.win, b.latest, b.window))
	}
	return nil
}

// withoutDeadline returns a context that ends when ctx ends but carries no deadline.
// A stream opened with ctx itself would send ctx's deadline to the node, whose timer
// can fire a moment before ours: the stream then fails with DEADLINE_EXCEEDED while
// ctx.Err() is still nil, and the planned end of a run looks like an error. With this
// context the bench ends its streams itself, after ctx is done.
func withoutDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	return c, func() { stop(); cancel() }
}
