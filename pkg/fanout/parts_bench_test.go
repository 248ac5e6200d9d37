package fanout

import (
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

func benchIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("register#ORDERS/i-%d", i)
	}
	return ids
}

// BenchmarkVersionTable measures the receive-side check of one event: admit into a
// table of keys task_ids (new versions each round, so every admit wins), and in
// parallel, as concurrent Replicate handlers do.
func BenchmarkVersionTable(b *testing.B) {
	for _, keys := range []int{1_000, 100_000} {
		ids := benchIDs(keys)
		b.Run(fmt.Sprintf("admit/keys=%d", keys), func(b *testing.B) {
			vt := newVersionTable(1_000_000)
			accept := func() bool { return true }
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				vt.admitString(ids[i%keys], stamp{version: uint64(i + 1), origin: "a"}, accept)
			}
		})
		b.Run(fmt.Sprintf("admit-parallel/keys=%d", keys), func(b *testing.B) {
			vt := newVersionTable(1_000_000)
			accept := func() bool { return true }
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					vt.admitString(ids[i%keys], stamp{version: uint64(i), origin: "a"}, accept)
				}
			})
		})
	}
}

// BenchmarkVersionTableChurn admits ever-new task_ids into a full table, as an origin
// taking unique keys does: every admit evicts the least recently used entry.
func BenchmarkVersionTableChurn(b *testing.B) {
	const capacity = versionShards * 1000
	ids := benchIDs(4 * capacity)
	vt := newVersionTable(capacity)
	accept := func() bool { return true }
	for i := range capacity {
		vt.admitString(ids[i], stamp{version: 1, origin: "a"}, accept)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		vt.admitString(ids[(capacity+i)%len(ids)], stamp{version: uint64(i + 2), origin: "a"}, accept)
	}
}

// BenchmarkVersionTableGrow admits new task_ids into an empty table of the default
// capacity, as every receiver does while unique keys fill its table (the first million
// task_ids of a saturated bench run). Run with -benchtime=1000000x to stay below
// capacity.
func BenchmarkVersionTableGrow(b *testing.B) {
	ids := benchIDs(b.N)
	vt := newVersionTable(1_000_000)
	accept := func() bool { return true }
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		vt.admitString(ids[i], stamp{version: uint64(i + 1), origin: "a"}, accept)
	}
}

// BenchmarkInbox measures put then pop of events through the inbox (one subscriber),
// with unique task_ids and with hot ones that coalesce.
func BenchmarkInbox(b *testing.B) {
	for _, keys := range []int{16, 100_000} {
		ids := benchIDs(keys)
		events := make([]delivery, keys)
		for i := range events {
			events[i] = deliveryOf(&fanoutv1.Event{TaskId: ids[i], Version: 1}, "a")
		}
		b.Run(fmt.Sprintf("put+pop/keys=%d", keys), func(b *testing.B) {
			in := newInbox(1 << 20)
			_, cancel := in.subscribe("", nil)
			defer cancel()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				in.put(events[i%keys])
				if i%popBatch == popBatch-1 {
					in.pop()
				}
			}
		})
	}
}
