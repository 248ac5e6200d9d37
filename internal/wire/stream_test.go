package wire

import (
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// TestReplicateStreamHead: a head, a batch appended after it and a hold after that
// are the ReplicateStreamRequest proto.Marshal writes, for seqs and holds of every
// varint length; the head and the hold are as long as ReplicateStreamHeadSize and
// ReplicateStreamHoldSize say; ParseReplicateStream reads them back.
func TestReplicateStreamHead(t *testing.T) {
	batch := &fanoutv1.ReplicateRequest{OriginNode: "a", Events: []*fanoutv1.Event{{TaskId: "k", Version: 9}}, SubmittedAtUnixNanos: []int64{5}}
	raw, err := proto.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{0, 1, 127, 128, 1 << 40, ^uint64(0)} {
		for _, hold := range []uint32{0, 1, 5000, 1 << 20, ^uint32(0)} {
			b := AppendReplicateStreamHead([]byte("x"), seq, len(raw))[1:]
			if len(b) != ReplicateStreamHeadSize(seq, len(raw)) {
				t.Fatalf("seq %d: head of %d bytes, ReplicateStreamHeadSize says %d", seq, len(b), ReplicateStreamHeadSize(seq, len(raw)))
			}
			b = append(b, raw...)
			n := len(b)
			b = AppendReplicateStreamHold(b, hold)
			if len(b)-n != ReplicateStreamHoldSize(hold) {
				t.Fatalf("hold %d: %d bytes, ReplicateStreamHoldSize says %d", hold, len(b)-n, ReplicateStreamHoldSize(hold))
			}
			want, err := proto.Marshal(&fanoutv1.ReplicateStreamRequest{Seq: seq, Batch: batch, AnswerHoldMicros: hold})
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != string(want) {
				t.Fatalf("seq %d hold %d: % x, proto.Marshal writes % x", seq, hold, b, want)
			}
			var r Replicate
			got, err := ParseReplicateStream(b, &r)
			if err != nil || got != (StreamHead{Seq: seq, HoldMicros: hold}) || r.Origin != "a" || len(r.Events) != 1 || len(r.Submitted) != 1 {
				t.Fatalf("seq %d hold %d: parsed %+v, %+v, %v", seq, hold, got, r, err)
			}
		}
	}
}

// FuzzParseReplicateStream: ParseReplicateStream accepts what proto.Unmarshal accepts,
// and reads the same seq, origin, number of events (each the bytes of the same event)
// and stamps; what it accepts and protobuf refuses has an event protobuf refuses (an
// event's bytes are read later, by ReadEvent).
func FuzzParseReplicateStream(f *testing.F) {
	seed, _ := proto.Marshal(&fanoutv1.ReplicateStreamRequest{Seq: 3, AnswerHoldMicros: 5000, Batch: &fanoutv1.ReplicateRequest{
		OriginNode: "o", Events: []*fanoutv1.Event{{TaskId: "k", Version: 1}, {TaskId: "j"}}, SubmittedAtUnixNanos: []int64{1, 2}}})
	f.Add(seed)
	f.Add(append(append([]byte{}, seed...), seed...)) // merged: two batches, the last seq
	f.Add([]byte{0x10, 0x01})                         // batch as a varint: an unknown field
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want fanoutv1.ReplicateStreamRequest
		werr := proto.Unmarshal(b, &want)
		var r Replicate
		head, err := ParseReplicateStream(b, &r)
		if err != nil {
			if werr == nil {
				t.Fatalf("ParseReplicateStream: %v; proto.Unmarshal accepts it: %v", err, &want)
			}
			return
		}
		if werr != nil {
			// An event's own bytes are read later (ReadEvent), so the request reads;
			// then one of its events must be what protobuf refused.
			for _, raw := range r.Events {
				if proto.Unmarshal(raw, new(fanoutv1.Event)) != nil {
					return
				}
			}
			t.Fatalf("ParseReplicateStream read %+v; proto.Unmarshal: %v", r, werr)
		}
		wb := want.GetBatch()
		if head.Seq != want.Seq || head.HoldMicros != want.AnswerHoldMicros || r.Origin != wb.GetOriginNode() || len(r.Events) != len(wb.GetEvents()) ||
			len(r.Submitted) != len(wb.GetSubmittedAtUnixNanos()) {
			t.Fatalf("read %+v origin %q %d events %d stamps; proto: %v", head, r.Origin, len(r.Events), len(r.Submitted), &want)
		}
		for i, raw := range r.Events {
			var ev fanoutv1.Event
			if err := proto.Unmarshal(raw, &ev); err != nil || !proto.Equal(&ev, wb.Events[i]) {
				t.Fatalf("event %d: %v (%v), proto: %v", i, &ev, err, wb.Events[i])
			}
		}
		for i, s := range r.Submitted {
			if s != wb.SubmittedAtUnixNanos[i] {
				t.Fatalf("stamp %d: %d, proto %d", i, s, wb.SubmittedAtUnixNanos[i])
			}
		}
	})
}
