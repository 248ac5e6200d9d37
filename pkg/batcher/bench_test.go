package batcher

import (
	"context"
	"fmt"
	"testing"
	"time"
)

var benchSizes = []int{1, 10, 100, 250}

// benchOffers builds k offers of n tasks each, with IDs unique across all of them.
func benchOffers(k, n int) [][]Task[int] {
	offers := make([][]Task[int], k)
	for i := range offers {
		offers[i] = make([]Task[int], n)
		for j := range offers[i] {
			offers[i][j] = Task[int]{ID: fmt.Sprintf("register#APP/i-%d", i*n+j), Value: j}
		}
	}
	return offers
}

// okProcessor answers OK for every task without allocating.
func okProcessor(maxBatch int) Processor[int] {
	items := make([]ItemOutcome, maxBatch)
	return ProcessorFunc[int](func(_ context.Context, batch []Task[int]) Result {
		return Result{Class: Success, Items: items[:len(batch)]}
	})
}

func reportPerTask(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/task")
}

// BenchmarkEnqueue offers batches of unique tasks to a running Batcher whose
// Processor answers OK at once: the full path, Offer to fate, through the
// goroutines. One op is one Offer.
func BenchmarkEnqueue(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			cfg := DefaultConfig[int]()
			bt, err := New(cfg, okProcessor(cfg.MaxBatch))
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close()
			offers := benchOffers(max(1, 1<<16/n), n)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := bt.Offer(ctx, offers[i%len(offers)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := bt.Drain(ctx); err != nil { // timed: the work is done when drained
				b.Fatal(err)
			}
			b.StopTimer()
			reportPerTask(b, n)
		})
	}
}

// BenchmarkEnqueueReading is BenchmarkEnqueue while another goroutine calls Stats in a
// loop, as fast as it can: far more often than any scrape or GetStatus, so the cost of
// sharing the published Stats with a reader shows.
func BenchmarkEnqueueReading(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			cfg := DefaultConfig[int]()
			bt, err := New(cfg, okProcessor(cfg.MaxBatch))
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close()
			stop := readLoop(func() Stats { return bt.Stats() })
			defer stop()
			offers := benchOffers(max(1, 1<<16/n), n)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := bt.Offer(ctx, offers[i%len(offers)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := bt.Drain(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			reportPerTask(b, n)
		})
	}
}

// readLoop calls read in a loop on its own goroutine until the returned stop is called,
// which waits for it.
func readLoop(read func() Stats) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-done:
				return
			default:
			}
			read()
		}
	}()
	return func() { close(done); <-exited }
}

// BenchmarkStatsPublish is the acceptor's side of the published Stats: one store after
// a step, alone and while a goroutine reads them in a loop.
func BenchmarkStatsPublish(b *testing.B) {
	for _, readers := range []int{0, 1} {
		b.Run(fmt.Sprintf("readers=%d", readers), func(b *testing.B) {
			var cells statCells
			if readers > 0 {
				stop := readLoop(cells.load)
				defer stop()
			}
			s := Stats{Pending: 10, IdleWorkers: 8}
			b.ReportAllocs()
			for b.Loop() {
				s.Accepted++
				s.Succeeded++
				cells.store(s)
			}
		})
	}
}

// BenchmarkEnqueueCore is BenchmarkEnqueue without goroutines: accept an offer,
// assign it, complete it OK.
func BenchmarkEnqueueCore(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			cfg := DefaultConfig[int]()
			loopCore(b, &cfg, n)
		})
	}
}

// BenchmarkEnqueueCoreBudget is BenchmarkEnqueueCore with a node budget shared by 300
// accounts (a node's peers) and Size set: what the budget adds to the hot path, one
// overBudget check per task and one flush per step. budget=roomy is never full;
// budget=full is over half its limit all the time (the other accounts hold it), so
// every check reads the shaper and the share.
func BenchmarkEnqueueCoreBudget(b *testing.B) {
	for _, full := range []bool{false, true} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("budget=%s/batch=%d", map[bool]string{false: "roomy", true: "full"}[full], n), func(b *testing.B) {
				cfg := DefaultConfig[int]()
				cfg.Size = func(int) int { return 100 }
				budget, err := NewBudget(256 << 20)
				if err != nil {
					b.Fatal(err)
				}
				cfg.Budget = budget
				for range 299 {
					budget.open()
				}
				if full {
					budget.used.Add(int64(budget.limit) * 3 / 4)
				}
				loopCore(b, &cfg, n)
			})
		}
	}
}

// BenchmarkCoalesce offers the same IDs again and again while they wait: every
// task after the first offer overrides one in pending.
func BenchmarkCoalesce(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			cfg := DefaultConfig[int]()
			c := newCore(&cfg)
			tasks := benchOffers(1, n)[0]
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				c.accept(tasks, now)
			}
			reportPerTask(b, n)
		})
	}
}

// BenchmarkCoalesceNewer is BenchmarkCoalesce with Config.Newer set and every
// arrival older than the task waiting, so that every one loses: the cost of the
// comparison on the coalescing path.
func BenchmarkCoalesceNewer(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			cfg := DefaultConfig[int]()
			cfg.Newer = func(x, y *Task[int]) bool { return x.Value > y.Value }
			c := newCore(&cfg)
			newest, older := benchOffers(1, n)[0], benchOffers(1, n)[0]
			for i := range newest {
				newest[i].Value, older[i].Value = 2, 1
			}
			now := time.Now()
			c.accept(newest, now)
			b.ReportAllocs()
			for b.Loop() {
				c.accept(older, now)
			}
			reportPerTask(b, n)
		})
	}
}

// BenchmarkAssign pops batches of MaxBatch tasks from a full pending and
// completes them OK. One op is one batch.
func BenchmarkAssign(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			cfg := DefaultConfig[int]()
			cfg.MaxBatch = n
			c := newCore(&cfg)
			fill := benchOffers(1, cfg.MaxBuffer)[0]
			items := make([]ItemOutcome, n)
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if c.order.n < n {
					b.StopTimer()
					c.accept(fill, now)
					b.StartTimer()
				}
				bt, ok := c.assign(now)
				if !ok {
					b.Fatal("nothing assigned")
				}
				bt.result = Result{Class: Success, Items: items[:len(bt.tasks)]}
				c.complete(bt, now)
			}
			reportPerTask(b, n)
		})
	}
}

// loopCore offers batches of n tasks to a core of cfg, completes every batch it
// assigns at once, and reports per task: the loop of the core benchmarks.
func loopCore(b *testing.B, cfg *Config[int], n int) {
	c := newCore(cfg)
	offers := benchOffers(max(1, 1<<16/n), n)
	items := make([]ItemOutcome, cfg.MaxBatch)
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.accept(offers[i%len(offers)], now)
		for bt, ok := c.assign(now); ok; bt, ok = c.assign(now) {
			bt.result = Result{Class: Success, Items: items[:len(bt.tasks)]}
			c.complete(bt, now)
		}
	}
	reportPerTask(b, n)
}
