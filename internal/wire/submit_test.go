package wire

import (
	"bytes"
	"slices"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestAppendSubmitResponse: AppendSubmitResponse writes the bytes protobuf's
// deterministic Marshal writes for the same response, and SubmitResponseSize is their
// length.
func TestAppendSubmitResponse(t *testing.T) {
	cases := []struct {
		r    SubmitResponse
		want *fanoutv1.SubmitResponse
	}{
		{SubmitResponse{}, &fanoutv1.SubmitResponse{}},
		{SubmitResponse{RequestID: 1 << 40, Satisfied: true, Versions: []uint64{1, 300, 1 << 63},
			Results: []EventResult{{Outcome: 1, Revision: 9}, {Outcome: 2, CurrentVersion: 5, CurrentOrigin: "n/é"}, {Outcome: 3, Detail: "full"}}},
			&fanoutv1.SubmitResponse{RequestId: 1 << 40, Satisfied: true, Versions: []uint64{1, 300, 1 << 63},
				Results: []*fanoutv1.EventResult{
					{Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED, Revision: 9},
					{Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_STALE, CurrentVersion: 5, CurrentOrigin: "n/é"},
					{Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_REFUSED, Detail: "full"}}}},
		{SubmitResponse{Versions: []uint64{0}, Results: []EventResult{{}},
			PeerAcks: []PeerAck{{Peer: "10.0.0.1:7000", State: 1}, {Peer: "b", State: 4, Detail: "peer removed"}, {State: -1}}},
			&fanoutv1.SubmitResponse{Versions: []uint64{0}, Results: []*fanoutv1.EventResult{{}},
				PeerAcks: []*fanoutv1.PeerAck{{Peer: "10.0.0.1:7000", State: 1}, {Peer: "b", State: 4, Detail: "peer removed"}, {State: -1}}}},
		{SubmitResponse{RequestID: 9, Versions: []uint64{4, 5}, Satisfied: true, RequestIDs: []uint64{7, 8, 1 << 50, 9}},
			&fanoutv1.SubmitResponse{RequestId: 9, Versions: []uint64{4, 5}, Satisfied: true, RequestIds: []uint64{7, 8, 1 << 50, 9}}},
	}
	for i, c := range cases {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.want)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendSubmitResponse([]byte("prefix"), &c.r)[len("prefix"):]
		if !bytes.Equal(got, want) {
			t.Errorf("case %d:\n got %x\nwant %x", i, got, want)
		}
		if n := SubmitResponseSize(&c.r); n != len(want) {
			t.Errorf("case %d: SubmitResponseSize %d, encoded %d", i, n, len(want))
		}
	}
}

// TestAppendEventVersion: the version appended is the event's version decoded,
// whatever version it had.
func TestAppendEventVersion(t *testing.T) {
	for _, had := range []uint64{0, 5, 1 << 63} {
		b, _ := proto.Marshal(&fanoutv1.Event{TaskId: "k", Version: had, Payload: []byte("p")})
		b = AppendEventVersion(b, 77)
		var ev fanoutv1.Event
		if err := proto.Unmarshal(b, &ev); err != nil || ev.Version != 77 || ev.TaskId != "k" {
			t.Fatalf("had %d: %v %v", had, &ev, err)
		}
	}
	if n := EventVersionSize(1 << 63); n != len(AppendEventVersion(nil, 1<<63)) {
		t.Fatalf("EventVersionSize %d", n)
	}
}

// FuzzParseSubmit: ParseSubmit accepts what proto.Unmarshal accepts and reads the same
// events (each the bytes of the same event), ack, ack_timeout and request_id; what it
// accepts and protobuf refuses has an event protobuf refuses (an event's bytes are
// read later, by ReadEvent).
func FuzzParseSubmit(f *testing.F) {
	seed, _ := proto.Marshal(&fanoutv1.SubmitRequest{RequestId: 7, Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, WindowAnswers: true, AnswerHoldMicros: 2000,
		AckTimeout: durationpb.New(1500e6), Events: []*fanoutv1.Event{{TaskId: "k", Version: 1}, {TaskId: "j"}}})
	f.Add(seed)
	f.Add(append(append([]byte{}, seed...), seed...)) // merged: four events, ack_timeout merged
	f.Add([]byte{0x12, 0x00})                         // ack as bytes: an unknown field
	f.Add([]byte{0x1a, 0x02, 0x10, 0x05})             // ack_timeout with nanos only
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want fanoutv1.SubmitRequest
		werr := proto.Unmarshal(b, &want)
		var s Submit
		if err := ParseSubmit(b, &s); err != nil {
			if werr == nil {
				t.Fatalf("ParseSubmit: %v; proto.Unmarshal accepts it: %v", err, &want)
			}
			return
		}
		if werr != nil {
			for _, raw := range s.Events {
				if proto.Unmarshal(raw, new(fanoutv1.Event)) != nil {
					return
				}
			}
			t.Fatalf("ParseSubmit read %+v; proto.Unmarshal: %v", s, werr)
		}
		if int32(s.Ack) != int32(want.Ack) || s.RequestID != want.RequestId || s.Window != want.WindowAnswers || s.HoldMicros != want.AnswerHoldMicros || s.AckTimeout != (want.AckTimeout != nil) ||
			int64(s.AckTimeoutSeconds) != want.GetAckTimeout().GetSeconds() || int32(s.AckTimeoutNanos) != want.GetAckTimeout().GetNanos() ||
			len(s.Events) != len(want.Events) {
			t.Fatalf("read %+v; proto: %v", s, &want)
		}
		for i, raw := range s.Events {
			var ev fanoutv1.Event
			if err := proto.Unmarshal(raw, &ev); err != nil || !proto.Equal(&ev, want.Events[i]) {
				t.Fatalf("event %d: %v (%v), proto: %v", i, &ev, err, want.Events[i])
			}
		}
	})
}

// TestAppendSubmitRequest: AppendSubmitEvent and AppendSubmitRequestID write what
// protobuf's deterministic Marshal writes for the same request.
func TestAppendSubmitRequest(t *testing.T) {
	for _, events := range [][]*fanoutv1.Event{
		nil,
		{{TaskId: "k", Payload: []byte("payload")}},
		{{TaskId: "a"}, {Payload: make([]byte, 300)}, {}, {TaskId: string(make([]byte, 200)), Payload: []byte{0}}},
	} {
		for _, id := range []uint64{0, 1, 1 << 40} {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&fanoutv1.SubmitRequest{RequestId: id, Events: events})
			if err != nil {
				t.Fatal(err)
			}
			got := []byte("prefix")
			for _, e := range events {
				got = AppendSubmitEvent(got, []byte(e.TaskId), e.Payload)
			}
			got = AppendSubmitRequestID(got, id)[len("prefix"):]
			if !bytes.Equal(got, want) {
				t.Errorf("%d events, request_id %d:\n got %x\nwant %x", len(events), id, got, want)
			}
		}
	}
}

// FuzzParseSubmitResponse: ParseSubmitResponse never panics, accepts everything
// proto.Unmarshal accepts and reads from it the same request_id, versions and
// results' outcomes. (It may accept what protobuf refuses for a reason
// it does not check: bad UTF-8, or a broken peer_ack.)
func FuzzParseSubmitResponse(f *testing.F) {
	for _, r := range []*SubmitResponse{
		{RequestID: 7, Versions: []uint64{1, 300}, Satisfied: true, Results: []EventResult{{Outcome: 1, Revision: 4}, {Outcome: 2, CurrentOrigin: "n"}}},
		{RequestID: 1, Versions: []uint64{0}, Results: []EventResult{{Outcome: 3, Detail: "state table full"}}, PeerAcks: []PeerAck{{Peer: "p", State: 1}}},
		{RequestID: 3, Versions: []uint64{5, 6}, Satisfied: true, RequestIDs: []uint64{2, 3}},
	} {
		f.Add(AppendSubmitResponse(nil, r))
	}
	f.Add([]byte{0x10, 0x05, 0x10, 0x06}) // versions unpacked
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want fanoutv1.SubmitResponse
		werr := proto.Unmarshal(b, &want)
		var a Answer
		err := ParseSubmitResponse(b, &a)
		if werr != nil {
			return
		}
		if err != nil {
			t.Fatalf("ParseSubmitResponse: %v; proto.Unmarshal accepts it: %v", err, &want)
		}
		if a.RequestID != want.RequestId || len(a.Versions) != len(want.Versions) || len(a.Outcomes) != len(want.Results) ||
			!slices.Equal(a.RequestIDs, want.RequestIds) {
			t.Fatalf("read %+v; proto: %v", a, &want)
		}
		for i, r := range want.Results {
			if a.Outcomes[i] != int32(r.Outcome) {
				t.Fatalf("results[%d].outcome = %d, proto: %d", i, a.Outcomes[i], r.Outcome)
			}
		}
		for i, v := range want.Versions {
			if a.Versions[i] != v {
				t.Fatalf("versions[%d] = %d, proto: %d", i, a.Versions[i], v)
			}
		}
	})
}
