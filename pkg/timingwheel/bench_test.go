package timingwheel

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks compare the wheel with the runtime's timers (time.AfterFunc),
// which keep a 4-ary heap per P: O(log n) to add, O(1) to stop (the stopped
// timer stays in the heap as a zombie until the heap is cleaned).
//
// Both sides get the same workload: n outstanding timers are added first and
// left pending (deadlines far enough that none fires during the run), then
// the measured loop adds timers whose delays come from the same precomputed,
// seeded table. Run with -cpu=1 as well: the runtime keeps one timer heap per
// P, and with one P the prefilled timers and the measured ones surely share it.

var outstandingSizes = []int{1e4, 1e5, 1e6}

// delays returns a seeded table of 4096 delays uniform in [lo, hi).
func delays(lo, hi time.Duration) []time.Duration {
	rng := rand.New(rand.NewPCG(7, 8))
	out := make([]time.Duration, 4096)
	for i := range out {
		out[i] = lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	return out
}

func noop() {}

// prefillWheel adds n pending timers with delays from ds.
func prefillWheel(b *testing.B, n int, ds []time.Duration) *Wheel {
	w := newWheel(b)
	for i := range n {
		w.AfterFunc(ds[i%len(ds)], noop)
	}
	return w
}

// prefillRuntime adds n pending runtime timers with delays from ds, and stops
// them when the benchmark ends.
func prefillRuntime(b *testing.B, n int, ds []time.Duration) {
	ts := make([]*time.Timer, n)
	for i := range ts {
		ts[i] = time.AfterFunc(ds[i%len(ds)], noop)
	}
	b.Cleanup(func() {
		for _, t := range ts {
			t.Stop()
		}
	})
}

// BenchmarkAddCancel adds a timer and cancels it at once: the fate of most
// ack deadlines, which complete long before they expire. Delays are 30-60s,
// on the wheel's fourth level, so Add walks four levels.
func BenchmarkAddCancel(b *testing.B) {
	ds := delays(30*time.Second, 60*time.Second)
	for _, n := range outstandingSizes {
		b.Run(fmt.Sprintf("outstanding=%.0e/wheel", float64(n)), func(b *testing.B) {
			w := prefillWheel(b, n, ds)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w.AfterFunc(ds[i&4095], noop).Stop()
			}
			b.StopTimer()
			if w.Len() != n {
				b.Fatalf("Len() = %d, want %d", w.Len(), n)
			}
		})
		b.Run(fmt.Sprintf("outstanding=%.0e/afterfunc", float64(n)), func(b *testing.B) {
			prefillRuntime(b, n, ds)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.AfterFunc(ds[i&4095], noop).Stop()
			}
		})
	}
}

// BenchmarkAddExpire adds timers that expire and measures add plus firing.
// Delays are 1-5ms. The wheel's clock is advanced by 1ms every 64 adds (64k
// timers a second of virtual time), so Advance runs about as often as a 1ms
// driver would, and at the end it jumps 10ms to fire the rest; its callbacks
// run inline on the advancing goroutine. The runtime's timers fire on their
// own: each expiry starts a goroutine running the callback (that is what
// AfterFunc does), and the benchmark waits for the last one, so its time
// includes up to 5ms of waiting at the end (under 1ns/op at b.N >= 1e7).
// The prefilled timers are 1-2h out and never fire.
func BenchmarkAddExpire(b *testing.B) {
	long := delays(time.Hour, 2*time.Hour)
	short := delays(time.Millisecond, 5*time.Millisecond)
	for _, n := range outstandingSizes {
		b.Run(fmt.Sprintf("outstanding=%.0e/wheel", float64(n)), func(b *testing.B) {
			w := prefillWheel(b, n, long)
			var fired atomic.Int64
			fire := func() { fired.Add(1) }
			now := t0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w.AfterFunc(short[i&4095], fire)
				if i&63 == 63 {
					now = now.Add(time.Millisecond)
					w.Advance(now)
				}
			}
			w.Advance(now.Add(10 * time.Millisecond))
			b.StopTimer()
			if got := fired.Load(); got != int64(b.N) || w.Len() != n {
				b.Fatalf("fired %d of %d; Len() = %d, want %d", got, b.N, w.Len(), n)
			}
		})
		b.Run(fmt.Sprintf("outstanding=%.0e/afterfunc", float64(n)), func(b *testing.B) {
			prefillRuntime(b, n, long)
			var wg sync.WaitGroup
			wg.Add(b.N)
			fire := wg.Done
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				time.AfterFunc(short[i&4095], fire)
			}
			wg.Wait()
		})
	}
}

// BenchmarkAdvance measures the driver's cost: one 1ms Advance with n
// pending timers and nothing due, and a one-hour jump over n pending timers
// due in 2-3 hours (the jump cascades whatever the passed buckets hold).
func BenchmarkAdvance(b *testing.B) {
	far := delays(2*time.Hour, 3*time.Hour)
	for _, n := range outstandingSizes {
		b.Run(fmt.Sprintf("outstanding=%.0e/step=1ms", float64(n)), func(b *testing.B) {
			w := prefillWheel(b, n, far)
			now := t0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now = now.Add(time.Millisecond)
				w.Advance(now)
			}
		})
	}
	b.Run("empty/jump=1h", func(b *testing.B) {
		w := newWheel(b)
		w.AfterFunc(100*365*24*time.Hour, noop) // grow every level
		now := t0
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			now = now.Add(time.Hour)
			w.Advance(now)
		}
	})
}
