package fanout

import (
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// benchEvent is a typical replicated event: a short task_id, a 100-byte payload, two
// attributes and a ttl.
func benchEvent(i int) *fanoutv1.Event {
	return &fanoutv1.Event{TaskId: fmt.Sprintf("task-%d", i), Payload: make([]byte, 100), Version: uint64(i + 1),
		Attributes: map[string]string{"region": "eu", "kind": "job"}, Ttl: durationpb.New(60e9)}
}

// BenchmarkReplicateParse measures reading a ReplicateRequest's bytes as the peer
// handler does (a fresh request per call), by events per request.
func BenchmarkReplicateParse(b *testing.B) {
	for _, events := range []int{1, 100} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			req := &fanoutv1.ReplicateRequest{OriginNode: "a"}
			for i := range events {
				req.Events = append(req.Events, benchEvent(i))
				req.SubmittedAtUnixNanos = append(req.SubmittedAtUnixNanos, 1700000000e9+int64(i))
			}
			data, err := proto.Marshal(req)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var r wire.Replicate
				if err := wire.ParseReplicate(data, &r); err != nil || len(r.Events) != events {
					b.Fatal(err, len(r.Events))
				}
			}
		})
	}
}

// BenchmarkReadEvent (the receive path's reader of one event) is in pkg/event.

// BenchmarkSubscribeAppend measures writing Subscribe messages from table entries:
// one entry per message, and a batch of 100.
func BenchmarkSubscribeAppend(b *testing.B) {
	raw, err := proto.Marshal(benchEvent(7))
	if err != nil {
		b.Fatal(err)
	}
	es := make([]state.Entry, 100)
	for i := range es {
		es[i] = state.Entry{Raw: raw, Stamp: state.Stamp{Version: 8, Origin: "node-a"}, Submitted: 1700000000123456789, Revision: uint64(i + 1)}
	}
	buf := make([]byte, 0, 64<<10)
	b.Run("entry", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = wire.AppendEntry(buf[:0], wireEntry(&es[0]))
		}
	})
	b.Run("batch=100", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = appendBatch(buf[:0], es)
		}
	})
}
