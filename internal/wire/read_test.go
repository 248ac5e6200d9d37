package wire

import (
	"slices"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestConsumeTagRefusesFieldNumbersProtobufRefuses(t *testing.T) {
	ok := protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.VarintType)
	if _, _, n := ConsumeTag(ok); n != len(ok) {
		t.Fatalf("largest valid field number refused: n = %d", n)
	}
	bad := protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3)
	if _, _, n := ConsumeTag(bad); n >= 0 {
		t.Fatal("field number above MaxValidNumber accepted")
	}
}

// TestParseReplicateMatchesProtobuf reads requests protobuf wrote, with
// submitted_at_unix_nanos packed (as protobuf writes it) and unpacked (as it also
// reads it), and refuses what protobuf refuses.
func TestParseReplicateMatchesProtobuf(t *testing.T) {
	ev1, _ := proto.Marshal(&fanoutv1.Event{TaskId: "a", Version: 1})
	ev2, _ := proto.Marshal(&fanoutv1.Event{TaskId: "b", Payload: []byte("p"), Version: 2})
	packed, err := proto.Marshal(&fanoutv1.ReplicateRequest{OriginNode: "n1",
		Events:               []*fanoutv1.Event{{TaskId: "a", Version: 1}, {TaskId: "b", Payload: []byte("p"), Version: 2}},
		SubmittedAtUnixNanos: []int64{5, -1}})
	if err != nil {
		t.Fatal(err)
	}
	unpacked := protowire.AppendString(protowire.AppendTag(nil, ReplicateRequestOriginNode, protowire.BytesType), "n1")
	for _, ev := range [][]byte{ev1, ev2} {
		unpacked = protowire.AppendBytes(protowire.AppendTag(unpacked, ReplicateRequestEvents, protowire.BytesType), ev)
	}
	for _, s := range []int64{5, -1} {
		unpacked = protowire.AppendVarint(protowire.AppendTag(unpacked, ReplicateRequestSubmittedAtUnixNanos, protowire.VarintType), uint64(s))
	}
	for name, b := range map[string][]byte{"packed": packed, "unpacked": unpacked} {
		t.Run(name, func(t *testing.T) {
			var r Replicate
			if err := ParseReplicate(b, &r); err != nil {
				t.Fatal(err)
			}
			if r.Origin != "n1" || len(r.Events) != 2 || !slices.Equal(r.Events[0], ev1) ||
				!slices.Equal(r.Events[1], ev2) || !slices.Equal(r.Submitted, []int64{5, -1}) {
				t.Fatalf("read %+v", r)
			}
		})
	}
	badOrigin := protowire.AppendBytes(protowire.AppendTag(nil, ReplicateRequestOriginNode, protowire.BytesType), []byte{0xff})
	for name, b := range map[string][]byte{"truncated": packed[:len(packed)-1], "origin not UTF-8": badOrigin} {
		if err := ParseReplicate(b, new(Replicate)); err != ErrMalformed {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// TestReadEventMatchesProtobuf reads events protobuf wrote. FuzzReadEvent (pkg/fanout)
// compares ReadEvent with protobuf's decoder on any bytes, through the node's limits.
func TestReadEventMatchesProtobuf(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   *fanoutv1.Event
	}{
		{"all fields", &fanoutv1.Event{TaskId: "task", Payload: []byte("payload"), Attributes: map[string]string{"a": "bc", "d": ""},
			Version: 9, Ttl: &durationpb.Duration{Seconds: 3, Nanos: 4}, Deleted: true}},
		{"negative ttl", &fanoutv1.Event{TaskId: "k", Ttl: &durationpb.Duration{Seconds: -1, Nanos: -5}}},
		{"empty", &fanoutv1.Event{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := proto.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			h, ok := ReadEvent(b)
			attrBytes := 0
			for k, v := range tc.ev.Attributes {
				attrBytes += len(k) + len(v)
			}
			if !ok || string(h.TaskID) != tc.ev.TaskId || h.TaskOff != TaskIDOffset(b) && h.TaskID != nil ||
				h.Version != tc.ev.Version || h.Deleted != tc.ev.Deleted || h.Payload != len(tc.ev.Payload) ||
				h.Attributes != len(tc.ev.Attributes) || h.AttributeBytes != attrBytes ||
				int64(h.TTLSeconds) != tc.ev.Ttl.GetSeconds() || int32(h.TTLNanos) != tc.ev.Ttl.GetNanos() {
				t.Fatalf("ReadEvent = %+v, %v; protobuf wrote %v", h, ok, tc.ev)
			}
			if n, size := DistinctAttributes(b); n != len(tc.ev.Attributes) || size != attrBytes {
				t.Fatalf("DistinctAttributes = %d, %d", n, size)
			}
		})
	}
	if _, ok := ReadEvent(protowire.AppendBytes(protowire.AppendTag(nil, EventTaskID, protowire.BytesType), []byte{0xff})); ok {
		t.Fatal("a task_id that is not UTF-8 was accepted")
	}
}
