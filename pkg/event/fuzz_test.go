package event

import (
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fuzzLimits are small, so that random bytes reach every bound.
func fuzzLimits() Limits {
	l := DefaultLimits()
	l.MaxEventBytes, l.MaxAttributes, l.MaxAttributeBytes = 64, 4, 32
	return l
}

// FuzzReadSubmit feeds arbitrary bytes to ReadSubmit and holds it to proto.Unmarshal
// plus the rules on the decoded request (decodedFault): it accepts exactly what they
// accept, reading the same events, ack, ack_timeout and request_id; on what they
// refuse it names the same field, in the same words (except for bytes protobuf
// refuses, which it words its own way).
func FuzzReadSubmit(f *testing.F) {
	seed, _ := proto.Marshal(&fanoutv1.SubmitRequest{RequestId: 3, AnswerHoldMicros: 1500, Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(time.Second),
		Events: []*fanoutv1.Event{{TaskId: "k", Payload: []byte("p"), Attributes: map[string]string{"a": "b"}, Ttl: durationpb.New(1)}, {TaskId: "j", Version: 5}}})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Add([]byte("garbage"))
	// An event with 100 bytes of an unknown field 99.
	f.Add([]byte{0x0a, 0x6a, 0x0a, 0x01, 'k', 0x9a, 0x06, 0x64, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	for _, t := range []*durationpb.Duration{{Seconds: 1, Nanos: -1}, {Seconds: -1}, {Nanos: 1e9}, {Seconds: maxDurationSeconds + 1}, {Seconds: maxDurationSeconds, Nanos: 999999999}} {
		b, _ := proto.Marshal(&fanoutv1.SubmitRequest{AckTimeout: t, Events: []*fanoutv1.Event{{TaskId: "k", Ttl: t}}})
		f.Add(b)
	}
	l := fuzzLimits()
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Submit
		err := l.ReadSubmit(data, &s)
		want := l.decodedFault(data)
		if err == nil {
			if want != nil {
				t.Fatalf("the reader accepts what the decoded rules refuse: %v", want)
			}
			var req fanoutv1.SubmitRequest
			if err := proto.Unmarshal(data, &req); err != nil {
				t.Fatalf("the reader accepts what protobuf refuses: %v", err)
			}
			if len(s.Events) != len(req.Events) || len(s.Heads) != len(req.Events) || s.Ack != req.Ack || s.RequestID != req.RequestId || s.Window != req.WindowAnswers || s.Hold != time.Duration(req.AnswerHoldMicros)*time.Microsecond ||
				(req.AckTimeout != nil && s.AckTimeout != req.AckTimeout.AsDuration()) || (req.AckTimeout == nil && s.AckTimeout != 0) {
				t.Fatalf("read %d events, ack %v, ack_timeout %v, request_id %d; decoded %v", len(s.Events), s.Ack, s.AckTimeout, s.RequestID, &req)
			}
			for i, ev := range req.Events {
				if h := s.Heads[i]; string(h.TaskID) != ev.TaskId || h.Version != ev.Version || h.Deleted != ev.Deleted ||
					TTL(&h) != ev.GetTtl().AsDuration() && ev.Ttl != nil {
					t.Fatalf("events[%d]: read %+v, decoded %v", i, h, ev)
				}
			}
			return
		}
		inv, ok := err.(*InvalidError)
		switch {
		case !ok:
			t.Fatalf("refused without naming a field: %v", err)
		case want == nil:
			t.Fatalf("the reader refuses (%v) what the decoded rules accept", err)
		case inv.Field != want.Field:
			t.Fatalf("the reader names %q (%v), the decoded rules %q (%v)", inv.Field, err, want.Field, want)
		case strings.HasPrefix(want.Reason, "not a valid "):
			if !strings.HasPrefix(inv.Reason, want.Reason[:strings.Index(want.Reason, ":")+1]) {
				t.Fatalf("the reader says %q, protobuf %q", inv.Reason, want.Reason)
			}
		case inv.Reason != want.Reason:
			t.Fatalf("the reader says %q, the decoded rules %q", err, want)
		}
	})
}

// FuzzReadEvent: ReadEvent, the receive path's reader of an event's bytes, agrees with
// decoding the event and validating it (validateEvent, and the bytes as they arrived
// within EventBytes) on any bytes that protobuf decodes, refuses what it does not, and
// reads the same task_id, version, deleted and ttl.
func FuzzReadEvent(f *testing.F) {
	for _, ev := range []*fanoutv1.Event{
		{TaskId: "k", Payload: []byte("p"), Attributes: map[string]string{"a": "b"}, Version: 3, Ttl: durationpb.New(1)},
		{TaskId: "k", Version: 1, Ttl: &durationpb.Duration{Seconds: -1}},
		{TaskId: "kkkk", Payload: make([]byte, 80), Version: 2},
		{TaskId: "gone", Version: 4, Deleted: true},
	} {
		b, _ := proto.Marshal(ev)
		f.Add(b)
	}
	// Valid fields, then an unknown field 99 that takes the event past EventBytes, and
	// a task_id repeated on the wire (protobuf keeps the last) that does too.
	unknown := protowire.AppendBytes(protowire.AppendTag([]byte{0x0a, 0x01, 'k', 0x20, 0x01}, 99, protowire.BytesType), make([]byte, 200))
	f.Add(unknown)
	repeated := []byte{}
	for range 30 {
		repeated = append(repeated, 0x0a, 0x08, 'k', 'k', 'k', 'k', 'k', 'k', 'k', 'k')
	}
	f.Add(append(repeated, 0x20, 0x01))
	l := DefaultLimits()
	l.MaxEventBytes, l.MaxTaskIDBytes, l.MaxAttributes, l.MaxAttributeBytes = 64, 16, 2, 24
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := l.ReadEvent(b)
		var ev fanoutv1.Event
		if err := proto.Unmarshal(b, &ev); err != nil {
			if ok {
				t.Fatalf("ReadEvent accepted bytes protobuf refuses (%v)", err)
			}
			return
		}
		want := l.validateEvent(0, &ev) == nil && len(b) <= l.EventBytes()
		if ok && string(b[h.TaskOff:h.TaskOff+len(h.TaskID)]) != string(h.TaskID) {
			t.Fatalf("task_id offset %d does not point at %q", h.TaskOff, h.TaskID)
		}
		if ok && wire.TaskIDOffset(b) != h.TaskOff {
			t.Fatalf("TaskIDOffset = %d, ReadEvent read the task_id at %d", wire.TaskIDOffset(b), h.TaskOff)
		}
		if ok != want || (ok && (string(h.TaskID) != ev.GetTaskId() || h.Version != ev.GetVersion() || h.Deleted != ev.GetDeleted() ||
			TTL(&h) != ev.GetTtl().AsDuration() && ev.Ttl != nil)) {
			t.Fatalf("ReadEvent = %q v%d %v; decoded %v, valid %v", h.TaskID, h.Version, ok, &ev, want)
		}
	})
}
