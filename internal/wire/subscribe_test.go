package wire

import (
	"bytes"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

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
		return // not a message; EachDelivery may say anything but must not panic
	}
	var got []Delivery
	if err := EachDelivery(b, func(d *Delivery) { got = append(got, *d) }); err != nil {
		t.Fatalf("EachDelivery: %v on a message protobuf decodes", err)
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
		if string(g.TaskID) != w.GetEvent().GetTaskId() || !bytes.Equal(g.Payload, w.GetEvent().GetPayload()) ||
			g.Version != w.GetEvent().GetVersion() || g.Submitted != sub {
			t.Fatalf("delivery %d: got %q %x v%d at %d; protobuf has %v", i, g.TaskID, g.Payload, g.Version, g.Submitted, w)
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
	if err := EachDelivery([]byte{0x0a, 0x05, 0x01}, func(*Delivery) {}); err == nil {
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
		_ = EachDelivery(b, func(*Delivery) {})
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
		if err := EachDelivery(data, func(*Delivery) { n++ }); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAppendEntryMatchesProtobuf decodes what the writers wrote: an Entry, which is
// also a one-event SubscribeResponse, a response of batch items, and
// snapshot_complete; the sizes are the bytes written.
func TestAppendEntryMatchesProtobuf(t *testing.T) {
	event := &fanoutv1.Event{TaskId: "t1", Payload: []byte("abc"), Version: 7}
	raw, err := proto.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	entries := []struct {
		name string
		e    Entry
		want *fanoutv1.Entry
	}{
		{"all fields", Entry{Event: raw, Origin: "a", Submitted: 1700000000123456789, Revision: 9},
			&fanoutv1.Entry{Event: event, OriginNode: "a", SubmittedAt: timestamppb.New(time.Unix(1700000000, 123456789)), Revision: 9}},
		{"event only", Entry{Event: raw}, &fanoutv1.Entry{Event: event}},
		{"before 1970", Entry{Event: raw, Submitted: -1}, &fanoutv1.Entry{Event: event, SubmittedAt: timestamppb.New(time.Unix(0, -1))}},
	}
	var batch []byte
	want := &fanoutv1.SubscribeResponse{}
	for _, tc := range entries {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendEntry(nil, tc.e)
			if len(b) != EntrySize(tc.e) {
				t.Fatalf("%d bytes written, EntrySize %d", len(b), EntrySize(tc.e))
			}
			var got fanoutv1.Entry
			if err := proto.Unmarshal(b, &got); err != nil || !proto.Equal(&got, tc.want) {
				t.Fatalf("decoded %v, %v; want %v", &got, err, tc.want)
			}
			var resp fanoutv1.SubscribeResponse
			wantResp := &fanoutv1.SubscribeResponse{Event: tc.want.Event, OriginNode: tc.want.OriginNode,
				SubmittedAt: tc.want.SubmittedAt, Revision: tc.want.Revision}
			if err := proto.Unmarshal(b, &resp); err != nil || !proto.Equal(&resp, wantResp) {
				t.Fatalf("as a SubscribeResponse: %v, %v; want %v", &resp, err, wantResp)
			}
		})
		before := len(batch)
		batch = AppendBatchItem(batch, tc.e)
		if len(batch)-before != BatchItemSize(tc.e) {
			t.Fatalf("%s: batch item of %d bytes, BatchItemSize %d", tc.name, len(batch)-before, BatchItemSize(tc.e))
		}
		want.Batch = append(want.Batch, tc.want)
	}
	var got fanoutv1.SubscribeResponse
	if err := proto.Unmarshal(batch, &got); err != nil || !proto.Equal(&got, want) {
		t.Fatalf("batch decoded %v, %v; want %v", &got, err, want)
	}
	if err := proto.Unmarshal(AppendSnapshotComplete(nil), &got); err != nil ||
		!proto.Equal(&got, &fanoutv1.SubscribeResponse{SnapshotComplete: true}) {
		t.Fatalf("snapshot_complete decoded %v, %v", &got, err)
	}
}
