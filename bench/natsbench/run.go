package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/fanout/fanout/bench/loadkit"
	"github.com/nats-io/nats.go"
)

// Timing of the parts of a run that are not flags, as in internal/loadgen.
const (
	probeEvery = 20 * time.Millisecond
	drainPoll  = 10 * time.Millisecond
	quietFor   = 500 * time.Millisecond // nothing arrives: the rest was lost
	stopWait   = 15 * time.Second
)

// subscriber is one connection with one subscription. nats.go calls handle from one
// goroutine per subscription; the drain reads the atomics, and the histograms are
// read after the connection has closed.
type subscriber struct {
	index       int
	conn        *nats.Conn
	sub         *nats.Subscription
	since       func() time.Duration
	measureFrom time.Duration // set before the first event is published
	window      *loadkit.Window

	probed                    atomic.Bool
	total, measured           atomic.Uint64
	lastArrival, lastMeasured atomic.Int64

	mu            sync.Mutex
	hist, histDue *hdrhistogram.Histogram
}

// handle records one message. A message shorter than a stamp is the readiness probe.
func (s *subscriber) handle(m *nats.Msg) { s.handleData(m.Data) }

// handleData records one message's payload (a KV watcher's entry value, or a core
// message's data).
func (s *subscriber) handleData(data []byte) {
	arrival := s.since()
	st, ok := loadkit.ReadStamp(data)
	if !ok {
		s.probed.Store(true)
		return
	}
	fromSent, fromDue := st.Latency(arrival)
	measured := st.Measured(s.measureFrom)
	s.mu.Lock()
	if measured {
		s.hist.RecordValue(loadkit.Us(fromSent))   //nolint:errcheck // clamped to the range
		s.histDue.RecordValue(loadkit.Us(fromDue)) //nolint:errcheck // clamped to the range
	}
	s.mu.Unlock()
	s.total.Add(1)
	s.lastArrival.Store(int64(arrival))
	if measured {
		s.measured.Add(1)
		s.lastMeasured.Store(int64(arrival))
	}
	s.window.Received(s.index, 1)
}

// bench is one run; run's goroutine owns it.
type bench struct {
	o         options
	servers   []*server // nil with --url
	subs      []*subscriber
	pub       *nats.Conn
	kv        *kvClient // with --kv
	window    *loadkit.Window
	slow      atomic.Int64 // slow-consumer errors reported to any connection
	epoch     time.Time
	start     time.Duration
	measureAt time.Duration
	end       time.Duration
}

func (b *bench) since() time.Duration { return time.Since(b.epoch) }

func run(ctx context.Context, o options) (*result, error) {
	b := &bench{o: o, epoch: time.Now()}
	cleanup, err := b.setup(ctx)
	defer cleanup()
	if err != nil {
		return nil, err
	}

	b.start = b.since()
	b.measureAt = b.start + o.warmup
	b.end = b.measureAt + o.duration
	for _, s := range b.subs {
		s.measureFrom = b.measureAt
	}
	var cpu0 []time.Duration
	var self0 time.Duration
	sampled := make(chan struct{})
	go func() { // the CPU at the start of the measured window, as sidecar bench reads it
		defer close(sampled)
		time.Sleep(b.measureAt - b.since())
		cpu0 = cpu(b.servers)
		self0, _ = loadkit.SelfCPU()
	}()
	stopProgress := b.progress()
	submitted, lag, err := b.publish(ctx)
	<-sampled
	if err != nil {
		stopProgress()
		return nil, err
	}
	err = b.drain(ctx, submitted)
	stopProgress()
	if err != nil {
		return nil, err
	}
	cpu1 := cpu(b.servers) // the end of the drain, as sidecar bench reads it
	self1, _ := loadkit.SelfCPU()
	b.closeConns()
	stopServers(b.servers, stopWait)
	r := b.result(submitted, lag)
	r.BenchCPUSeconds = (self1 - self0).Seconds()
	b.addUsage(r, cpu0, cpu1)
	return r, nil
}

// setup starts the servers (with --spawn), connects the publisher and the subscribers
// (or KV watchers) and waits until the subscriptions reach the publisher's server.
// cleanup closes the connections, stops the servers and removes their stores; call it
// even on an error.
func (b *bench) setup(ctx context.Context) (cleanup func(), err error) {
	o := b.o
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	urls := []string{o.url}
	if o.spawn > 0 {
		storeDir := ""
		if o.kv != "" {
			d, err := os.MkdirTemp("", "natsbench-")
			if err != nil {
				return cleanup, err
			}
			undo = append(undo, func() { os.RemoveAll(d) }) // after the servers have stopped
			storeDir = d
		}
		servers, err := startServers(ctx, o.natsServer, o.spawn, storeDir, o.readyTimeout, o.memoryKeys > 0)
		if err != nil {
			return cleanup, err
		}
		b.servers = servers
		undo = append(undo, func() { stopServers(servers, stopWait) }) // stopping twice is harmless
		urls = urls[:0]
		for _, s := range servers {
			urls = append(urls, s.url())
		}
	}
	// Subscriber i's server: every server but the first, one each; or all on the one.
	subURLs := urls[1:]
	if o.watchers > 0 && len(urls) > 1 {
		subURLs = make([]string, o.watchers)
		for i := range subURLs {
			subURLs[i] = urls[1+i%(len(urls)-1)]
		}
	}
	if len(urls) == 1 {
		subURLs = make([]string, o.subscribers)
		for i := range subURLs {
			subURLs[i] = urls[0]
		}
	}
	if o.rate == 0 {
		b.window = loadkit.NewWindow(int64(o.window), len(subURLs), 0)
	}
	undo = append(undo, b.closeConns)
	if o.kv != "" {
		if err := b.connectKV(ctx, urls[0], subURLs); err != nil {
			return cleanup, err
		}
	} else if err := b.connect(urls[0], subURLs); err != nil {
		return cleanup, err
	}
	return cleanup, b.probe(ctx)
}

func (b *bench) connect(pubURL string, subURLs []string) error {
	onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			b.slow.Add(1)
		}
	})
	for i, u := range subURLs {
		s := &subscriber{index: i, since: b.since, window: b.window, hist: loadkit.NewHistogram(), histDue: loadkit.NewHistogram()}
		nc, err := nats.Connect(u, nats.Name(fmt.Sprintf("natsbench-sub-%d", i)), onErr)
		if err != nil {
			return fmt.Errorf("subscriber %d on %s: %w", i, u, err)
		}
		s.conn = nc
		b.subs = append(b.subs, s)
		if s.sub, err = nc.Subscribe(b.o.subject, s.handle); err != nil {
			return err
		}
		if err := s.sub.SetPendingLimits(-1, -1); err != nil { // never drop in the client: measure the servers
			return err
		}
		if err := nc.Flush(); err != nil {
			return err
		}
	}
	nc, err := nats.Connect(pubURL, nats.Name("natsbench-pub"), onErr)
	if err != nil {
		return fmt.Errorf("publisher on %s: %w", pubURL, err)
	}
	b.pub = nc
	return nil
}

func (b *bench) closeConns() {
	if b.kv != nil {
		b.kv.stop()
	}
	for _, s := range b.subs {
		s.conn.Close()
	}
	if b.pub != nil {
		b.pub.Close()
	}
}

// probe publishes a 1-byte message on the publisher's server until every subscriber
// has received one: the subscriptions have then reached server 0 over the routes (an
// event published before would find no interest there and vanish), as sidecar bench
// waits until every node counts its subscriber.
func (b *bench) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.o.readyTimeout)
	defer cancel()
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		all := true
		for _, s := range b.subs {
			all = all && s.probed.Load()
		}
		if all {
			return nil
		}
		subject := b.o.subject
		if b.kv != nil {
			subject = b.kv.subject("probe")
		}
		if err := b.pub.Publish(subject, []byte{0}); err != nil {
			return err
		}
		if err := b.pub.Flush(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the subscriptions did not reach the publisher's server: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// publish runs the shared pacer from start to end: each send is o.batch publishes of
// one payload stamped once, right before the first of them. nats.go buffers a
// publish and its flusher goroutine writes the buffer out, so the publishes of a
// send usually leave in one write, as a Submit of that many events would. It returns
// the events published in the measured window and the pacer's lag histogram.
func (b *bench) publish(ctx context.Context) (uint64, *hdrhistogram.Histogram, error) {
	pacer := loadkit.NewPacer(b.since, float64(b.o.rate), b.o.batch, b.start, b.end)
	defer pacer.Stop()
	buf := make([]byte, b.o.payload) // Publish copies it into the connection's buffer
	// The window's waits end with the publishing time (one context, not one per send).
	wctx, cancel := context.WithTimeout(ctx, b.end-b.since())
	defer cancel()
	var measured uint64
	for {
		due, ok, err := pacer.Next(ctx)
		if err != nil {
			return 0, nil, err
		}
		if !ok {
			break
		}
		if err := b.window.Acquire(wctx, b.o.batch); err != nil { // nil window: no wait
			if ctx.Err() != nil {
				return 0, nil, ctx.Err()
			}
			break // the publishing time ended while waiting
		}
		st := pacer.Stamp(due)
		st.Put(buf)
		for range b.o.batch {
			if b.kv != nil {
				if err := b.kv.put(buf); err != nil {
					return 0, nil, fmt.Errorf("kv put: %w", err)
				}
			} else if err := b.pub.Publish(b.o.subject, buf); err != nil {
				return 0, nil, fmt.Errorf("publish: %w", err)
			}
		}
		pacer.Done(b.o.batch, st)
		if st.Measured(b.measureAt) {
			measured += uint64(b.o.batch)
		}
	}
	if b.kv != nil { // every put acknowledged (or failed)
		if err := b.kv.complete(ctx, b.o.drainTimeout); err != nil {
			return 0, nil, err
		}
	}
	// A PING/PONG round trip: every publish has reached server 0.
	if err := b.pub.FlushTimeout(b.o.drainTimeout); err != nil {
		return 0, nil, fmt.Errorf("flush: %w", err)
	}
	return measured, pacer.Lag(), nil
}

// drain waits until every subscriber has every measured event, or nothing has
// arrived for quietFor (the rest was lost), or the drain timeout passes: the rule of
// sidecar bench.
func (b *bench) drain(ctx context.Context, submitted uint64) error {
	ctx, cancel := context.WithTimeout(ctx, b.o.drainTimeout)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		done, last := true, time.Duration(0)
		for _, s := range b.subs {
			done = done && s.measured.Load() >= submitted
			last = max(last, time.Duration(s.lastArrival.Load()))
		}
		if done || b.since()-last >= quietFor {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil // the result says what is missing
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// progress prints a line per interval on stderr until the returned func is called.
func (b *bench) progress() func() {
	if b.o.interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(b.o.interval)
		defer tick.Stop()
		var prevSent, prevGot uint64
		prevAt := b.since()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := b.since()
			sent := b.pub.Stats().OutMsgs
			var got uint64
			for _, s := range b.subs {
				got += s.total.Load()
			}
			secs := (now - prevAt).Seconds()
			fmt.Fprintf(os.Stderr, "%6s  published %8.0f/s  delivered %8.0f/s\n", (now - b.start).Round(time.Second),
				float64(sent-prevSent)/secs, float64(got-prevGot)/secs)
			prevSent, prevGot, prevAt = sent, got, now
		}
	}()
	return func() { cancel(); <-done }
}

func (b *bench) result(submitted uint64, lag *hdrhistogram.Histogram) *result {
	o := b.o
	r := &result{
		System: "nats", Nodes: max(1, len(b.servers)), Spawned: b.servers != nil, Publishers: 1, Subscribers: len(b.subs),
		Rate: o.rate, Batch: o.batch, Window: int(b.window.Max()), Payload: o.payload,
		DurationSec: o.duration.Seconds(), WarmupSec: o.warmup.Seconds(), LatencyFrom: "payload",
		Submitted: submitted, SlowConsumers: b.slow.Load(),
	}
	if b.kv != nil {
		r.PublishErrors = b.kv.errs.Load()
	}
	if len(b.servers) == 1 {
		r.System = "nats-single"
	} else if len(b.servers) > 1 {
		r.System = "nats-cluster"
	}
	if b.kv != nil {
		r.System, r.KVStorage, r.Replicas = "nats-kv", o.kvStorage, o.replicas
	}
	all, allDue := loadkit.NewHistogram(), loadkit.NewHistogram()
	var lastMeasured time.Duration
	for _, s := range b.subs {
		s.mu.Lock()
		all.Merge(s.hist)
		allDue.Merge(s.histDue)
		s.mu.Unlock()
		r.Delivered += s.measured.Load()
		lastMeasured = max(lastMeasured, time.Duration(s.lastMeasured.Load()))
	}
	r.Latency, r.LatencyFromDue, r.SendLag = loadkit.Summarize(all), loadkit.Summarize(allDue), loadkit.Summarize(lag)
	if want := submitted * uint64(len(b.subs)); r.Delivered < want {
		r.Lost = want - r.Delivered
	}
	r.WindowStalls, r.WrittenOff = b.window.Stalls()
	// As sidecar bench: submitted over the measured time, delivered over the measured
	// time or until the last measured arrival if later.
	r.SubmitPerSec = float64(submitted) / o.duration.Seconds()
	r.DeliveredPerSec = float64(r.Delivered) / max(o.duration, lastMeasured-b.measureAt).Seconds()
	return r
}

// addUsage fills in the servers' CPU over the measured window and the drain (from
// /proc, the difference of two samples) and their peak RSS (rusage of the exited
// process), as sidecar bench does for its nodes.
func (b *bench) addUsage(r *result, cpu0, cpu1 []time.Duration) {
	procs := make([]loadkit.Process, len(b.servers))
	for i, s := range b.servers {
		procs[i] = loadkit.Process{ID: s.id, State: s.cmd.ProcessState}
	}
	var total time.Duration
	r.NodeResults, total, r.NodePeakRSSBytes = loadkit.NodesUsage(procs, cpu0, cpu1)
	r.NodeCPUSeconds = total.Seconds()
	if r.Delivered > 0 {
		r.CPUUsPerDelivered = float64(total.Microseconds()) / float64(r.Delivered)
	}
}
