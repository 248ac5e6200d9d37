package state

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// benchEvents makes n events of ~24-byte keys and 100-byte payloads, encoded roughly
// as fanout.v1.Event is (tag, length, key; tag, length, payload; version).
func benchEvents(n int) (raws [][]byte, keyLen int) {
	raws = make([][]byte, n)
	for i := range raws {
		key := fmt.Sprintf("register#ORDERS/i-%06d", i)
		raw := append([]byte{0x0a, byte(len(key))}, key...)
		raw = append(raw, 0x12, 100)
		raw = append(raw, make([]byte, 100)...)
		raw = append(raw, 0x20, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01)
		raws[i], keyLen = raw, len(key)
	}
	return raws, keyLen
}

func benchTable(b *testing.B, maxKeys int) *Table {
	t, err := New(Config{MaxKeys: maxKeys, MaxBytes: 1 << 40, TombstoneTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return t
}

func write(raw []byte, keyLen int, v uint64) *Write {
	return &Write{Key: raw[2 : 2+keyLen], KeyOffset: 2, Raw: raw, Stamp: Stamp{Version: v, Origin: "node-a"}}
}

// BenchmarkTable measures the table's operations on tables of keys entries: a new key
// (insert), a newer version of a held key (update), a stale write (the duplicate a
// retried batch brings), and a read (lookup).
func BenchmarkTable(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	for _, keys := range []int{1_000, 100_000, 1_000_000} {
		raws, kl := benchEvents(keys)
		b.Run(fmt.Sprintf("insert/keys=%d", keys), func(b *testing.B) {
			b.ReportAllocs()
			var t *Table
			for i := 0; i < b.N; i++ {
				if i%keys == 0 {
					b.StopTimer()
					t = benchTable(b, keys)
					b.StartTimer()
				}
				t.Put(write(raws[i%keys], kl, 1), now)
			}
		})
		t := benchTable(b, keys)
		for i := range raws {
			t.Put(write(raws[i], kl, 1), now)
		}
		b.Run(fmt.Sprintf("update/keys=%d", keys), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				t.Put(write(raws[i%keys], kl, uint64(2+i)), now)
			}
		})
		b.Run(fmt.Sprintf("stale/keys=%d", keys), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				t.Put(write(raws[i%keys], kl, 1), now)
			}
		})
		b.Run(fmt.Sprintf("lookup/keys=%d", keys), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				t.Get(raws[i%keys][2 : 2+kl])
			}
		})
	}
}

// BenchmarkScan measures a watcher reading every change in batches of 256.
func BenchmarkScan(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	raws, kl := benchEvents(100_000)
	t := benchTable(b, len(raws))
	for i := range raws {
		t.Put(write(raws[i], kl, 1), now)
	}
	buf := make([]Entry, 0, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := Scan{MaxEntries: 256, MaxBytes: 1 << 20}
		for !t.Done(&s) {
			buf, _ = t.Next(&s, buf[:0])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(raws)), "ns/entry")
}

// BenchmarkGC measures what a full table costs the garbage collector: one forced
// collection with a table of 1M keys live (the sidecar's default bound). It also
// reports the heap after a collection and what the table holds: its event bytes, its
// arena (event bytes and dead records) and its revision log slots.
func BenchmarkGC(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	raws, kl := benchEvents(1_000_000)
	t := benchTable(b, len(raws))
	for i := range raws {
		t.Put(write(raws[i], kl, 1), now)
	}
	raws = nil
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.GC()
	}
	b.StopTimer()
	// After the loop: ResetTimer deletes the metrics reported before it.
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(ms.HeapObjects), "heap-objects")
	st := t.Stats()
	b.ReportMetric(float64(st.Bytes)/(1<<20), "event-MiB")
	b.ReportMetric(float64(st.ArenaBytes)/(1<<20), "arena-MiB")
	b.ReportMetric(float64(st.LogSlots), "log-slots")
	runtime.KeepAlive(t)
}

// BenchmarkChurn measures updates of a full table's keys in two orders: fifo (each
// key again after every other, as a saturated run's receiver sees them: the arena's
// slabs die whole, in order) and random (uniform: every slab decays alike). It
// reports the arena's footprint per event byte held (arena-x), which the slabs'
// compaction trades against the bytes it copies.
func BenchmarkChurn(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	const keys = 100_000
	raws, kl := benchEvents(keys)
	for _, order := range []string{"fifo", "random"} {
		b.Run(fmt.Sprintf("order=%s/keys=%d", order, keys), func(b *testing.B) {
			t := benchTable(b, keys)
			for i := range raws {
				t.Put(write(raws[i], kl, 1), now)
			}
			next := func(i int) int { return i % keys }
			if order == "random" {
				rng := rand.New(rand.NewPCG(1, 2))
				next = func(int) int { return rng.IntN(keys) }
			}
			for i := range 3 * keys { // past the first compactions: a steady state
				t.Put(write(raws[next(i)], kl, uint64(2+i)), now)
			}
			v := uint64(3 * keys)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				v++
				t.Put(write(raws[next(i)], kl, v), now)
				i++
			}
			st := t.Stats()
			b.ReportMetric(float64(st.ArenaBytes)/float64(st.Bytes), "arena-x")
		})
	}
}
