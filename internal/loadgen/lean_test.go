package loadgen

import (
	"bytes"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// observeMsg sends resp through the wire format and the bench's raw reader, as a
// subscriber's stream does.
func observeMsg(t *testing.T, s *subscriber, resp *fanoutv1.SubscribeResponse, arrival time.Duration) {
	t.Helper()
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	if err := eachDelivery(b, func(d *delivered) { s.observe(d, arrival) }); err != nil {
		t.Fatal(err)
	}
}

// flatten is what the raw reader must find in r: its own event, then its batch's.
func flatten(r *fanoutv1.SubscribeResponse) []*fanoutv1.Entry {
	var out []*fanoutv1.Entry
	if r.GetEvent() != nil {
		out = append(out, &fanoutv1.Entry{Event: r.GetEvent(), SubmittedAt: r.GetSubmittedAt()})
	}
	for _, it := range r.GetBatch() {
		if it.GetEvent() != nil {
			out = append(out, it)
		}
	}
	return out
}

// checkAgainstProto compares the raw reader with the protobuf decoder on b.
func checkAgainstProto(t *testing.T, b []byte) {
	var want fanoutv1.SubscribeResponse
	if err := proto.Unmarshal(b, &want); err != nil {
		return // not a message; eachDelivery may say anything but must not panic
	}
	var got []delivered
	if err := eachDelivery(b, func(d *delivered) { got = append(got, *d) }); err != nil {
		t.Fatalf("eachDelivery: %v on a message protobuf decodes", err)
	}
	flat := flatten(&want)
	if len(got) != len(flat) {
		t.Fatalf("%d deliveries, protobuf has %d", len(got), len(flat))
	}
	for i, w := range flat {
		g := got[i]
		var sub int64
		if ts := w.GetSubmittedAt(); ts != nil {
			sub = ts.GetSeconds()*1e9 + int64(ts.GetNanos())
		}
		if string(g.taskID) != w.GetEvent().GetTaskId() || !bytes.Equal(g.payload, w.GetEvent().GetPayload()) ||
			g.version != w.GetEvent().GetVersion() || g.submitted != sub {
			t.Fatalf("delivery %d: got %q %x v%d at %d; protobuf has %v", i, g.taskID, g.payload, g.version, g.submitted, w)
		}
	}
}

func TestEachDeliveryMatchesProtobuf(t *testing.T) {
	ts := timestamppb.New(time.Unix(1700000000, 123456789))
	single := &fanoutv1.SubscribeResponse{
		Event:      &fanoutv1.Event{TaskId: "t1", Payload: []byte("abc"), Version: 7, Attributes: map[string]string{"k": "v"}},
		OriginNode: "a", SubmittedAt: ts,
	}
	batch := &fanoutv1.SubscribeResponse{Batch: []*fanoutv1.Entry{
		{Event: single.Event, OriginNode: "a", SubmittedAt: ts, Revision: 9},
		{Event: &fanoutv1.Event{TaskId: "t2", Version: 1<<63 + 5}, OriginNode: "b"}, // no payload, no time
		{Event: &fanoutv1.Event{TaskId: "t3", Payload: make([]byte, 300)}, SubmittedAt: timestamppb.New(time.Unix(-5, 1))},
	}}
	for name, m := range map[string]*fanoutv1.SubscribeResponse{"single": single, "batch": batch, "empty": {}} {
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstProto(t, b)
		})
	}
	if err := eachDelivery([]byte{0x0a, 0x05, 0x01}, func(*delivered) {}); err == nil {
		t.Fatal("a truncated event was accepted")
	}
}

// FuzzEachDelivery: on any bytes the raw reader does not panic, and on every message
// protobuf decodes it finds the same deliveries. The seeds are real responses.
func FuzzEachDelivery(f *testing.F) {
	for _, m := range []*fanoutv1.SubscribeResponse{
		{Event: &fanoutv1.Event{TaskId: "x", Payload: []byte{1, 2, 3, 4, 5, 6, 7, 8}, Version: 3}, SubmittedAt: timestamppb.Now()},
		{Batch: []*fanoutv1.Entry{{Event: &fanoutv1.Event{TaskId: "a"}}, {Event: &fanoutv1.Event{TaskId: "b", Version: 2}}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = eachDelivery(b, func(*delivered) {})
		checkAgainstProto(t, b)
	})
}

// BenchmarkEachDelivery measures the subscribers' reader on a SubscribeResponse with a
// batch of 100 entries.
func BenchmarkEachDelivery(b *testing.B) {
	ts := timestamppb.New(time.Unix(1700000000, 123456789))
	m := &fanoutv1.SubscribeResponse{}
	for i := range 100 {
		m.Batch = append(m.Batch, &fanoutv1.Entry{Event: &fanoutv1.Event{TaskId: "task", Payload: make([]byte, 100), Version: uint64(i + 1)},
			OriginNode: "node-a", SubmittedAt: ts, Revision: uint64(i + 1)})
	}
	data, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := eachDelivery(data, func(*delivered) { n++ }); err != nil {
			b.Fatal(err)
		}
	}
}
