package event

import (
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// BenchmarkReadSubmit measures ReadSubmit of a request of batch events of 100 bytes
// with a ttl and two attributes, as an app sends them (no unknown fields): what the
// app listener does with every Submit's bytes. (It replaces BenchmarkValidateSubmit,
// which measured the validator of decoded requests this reader replaced.)
func BenchmarkReadSubmit(b *testing.B) {
	l := DefaultLimits()
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			req := &fanoutv1.SubmitRequest{Events: make([]*fanoutv1.Event, batch)}
			for i := range req.Events {
				req.Events[i] = &fanoutv1.Event{TaskId: fmt.Sprintf("register#ORDERS/i-%d", i), Payload: make([]byte, 100),
					Attributes: map[string]string{"zone": "a", "status": "UP"}, Ttl: durationpb.New(30e9)}
			}
			data, err := proto.Marshal(req)
			if err != nil {
				b.Fatal(err)
			}
			var s Submit
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := l.ReadSubmit(data, &s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadEvent measures the receive path's reader of one event's bytes: a
// short task_id, a 100-byte payload, two attributes and a ttl.
func BenchmarkReadEvent(b *testing.B) {
	data, err := proto.Marshal(&fanoutv1.Event{TaskId: "task-7", Payload: make([]byte, 100), Version: 8,
		Attributes: map[string]string{"region": "eu", "kind": "job"}, Ttl: durationpb.New(60e9)})
	if err != nil {
		b.Fatal(err)
	}
	l := DefaultLimits()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, ok := l.ReadEvent(data); !ok {
			b.Fatal("refused")
		}
	}
}
