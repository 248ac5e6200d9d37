package event

import (
	"fmt"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Submit is a fanout.v1.SubmitRequest as ReadSubmit read and checked it. Reuse one
// across requests: ReadSubmit overwrites it and appends to its slices from length 0.
type Submit struct {
	// Events are the events' bytes as the app encoded them; they alias the request's.
	Events [][]byte
	// Heads has what the reader read of each event (task_id, version, deleted...).
	Heads []wire.EventHead
	// Ack is the policy (a known value); AckTimeout is ack_timeout, 0 without one.
	Ack        fanoutv1.AckPolicy
	AckTimeout time.Duration
	RequestID  uint64
	// Window is window_answers: on SubmitStream, the answer may be sent with the
	// next requests' (API v1.2).
	Window bool
	// Hold is answer_hold_micros: on SubmitStream, as Window, and the answer is sent
	// at the latest this long after the first held one (API v1.3). 0: none.
	Hold time.Duration
}

// ReadSubmit reads the SubmitRequest in b into s and checks the whole of it against
// the limits, reading every byte once (internal/wire) and decoding nothing. It returns
// nil, or an *InvalidError that names the first field that breaks a rule, in this
// order:
//
//  1. bytes that protobuf would refuse: the request's framing ("request: not a valid
//     fanout.v1.SubmitRequest: …"), else the first event's ("events[1]: not a valid
//     fanout.v1.Event: …", naming the field inside when it is a string that is not
//     UTF-8 or a malformed ttl);
//  2. the request's fields: the number of events, ack, ack_timeout;
//  3. each event's fields in turn (task_id, payload, attributes, ttl: "events[3].task_id:
//     empty");
//  4. each event's size as it will be stored: the bytes the app sent, with the version
//     the node appends when it has none, within EventBytes.
//
// A version's bound depends on the node's clock: the node checks it after this.
func (l Limits) ReadSubmit(b []byte, s *Submit) error {
	r := wire.Submit{Events: s.Events[:0]}
	err := wire.ParseSubmit(b, &r)
	s.Events, s.Heads = r.Events, s.Heads[:0]
	if err != nil {
		return Invalid("request", "not a valid fanout.v1.SubmitRequest: its bytes are not a protobuf message "+
			"(a tag, a length or a varint is cut short or invalid, or ack_timeout is not a Duration)")
	}
	firstFault, firstBig := -1, -1 // the first event that breaks a field's rule, or its size
	var fault eventFault
	bytes := l.EventBytes()
	for i, raw := range s.Events {
		h, f := l.readEvent(raw)
		if f.code == malformed { // before any other rule
			return f.err(i, &h)
		}
		s.Heads = append(s.Heads, h)
		if f.code != valid && firstFault < 0 {
			firstFault, fault = i, f
		}
		if firstBig < 0 && StoredSize(len(raw), h.Version) > bytes {
			firstBig = i
		}
	}
	if k := len(s.Events); k > l.MaxEvents {
		return Invalid("events", "%d events, at most %d per request; split the batch", k, l.MaxEvents)
	}
	ack := int32(r.Ack) // an enum decodes as int32
	if _, ok := fanoutv1.AckPolicy_name[ack]; !ok {
		return Invalid("ack", "unknown policy %d", ack)
	}
	if r.AckTimeout && !nonNegativeDuration(r.AckTimeoutSeconds, r.AckTimeoutNanos) {
		return durationFault("ack_timeout", r.AckTimeoutSeconds, r.AckTimeoutNanos, "use 0 for the default")
	}
	if firstFault >= 0 {
		return fault.err(firstFault, &s.Heads[firstFault])
	}
	if i := firstBig; i >= 0 {
		return Invalid(fmt.Sprintf("events[%d]", i), "%d bytes as sent, with the version the sidecar adds; at most %d "+
			"(a payload of --max-event-bytes %d, and room for task_id, attributes, version and ttl); fields "+
			"this sidecar does not know, and fields sent twice, count too: send a smaller event, or only "+
			"the fields of fanout.v1.Event, once each", StoredSize(len(s.Events[i]), s.Heads[i].Version), bytes, l.MaxEventBytes)
	}
	s.Ack, s.AckTimeout, s.RequestID, s.Window = fanoutv1.AckPolicy(ack), 0, r.RequestID, r.Window
	s.Hold = time.Duration(r.HoldMicros) * time.Microsecond
	if r.AckTimeout {
		s.AckTimeout = asDuration(r.AckTimeoutSeconds, r.AckTimeoutNanos)
	}
	return nil
}

// StoredSize is the size of an event of n bytes as the node stores an app's event:
// with the version it appends when the event has none (wire.AppendEventVersion),
// counted at its largest.
func StoredSize(n int, version uint64) int {
	if version == 0 {
		return n + wire.EventVersionSize(1<<64-1)
	}
	return n
}

// ReadEvent reads an event's bytes as they arrived (a peer's, anti-entropy's, the data
// dir's) and reports whether it is valid: within EventBytes as it is, and every field
// within the limits, by the same rules as ReadSubmit. Its refusal is an INVALID item,
// so it says no more; it does not allocate unless an attributes key repeats.
func (l Limits) ReadEvent(b []byte) (wire.EventHead, bool) {
	if len(b) > l.EventBytes() {
		return wire.EventHead{}, false
	}
	h, f := l.readEvent(b)
	return h, f.code == valid
}

// faultCode is a rule an event breaks.
type faultCode uint8

const (
	valid     faultCode = iota
	malformed           // protobuf refuses the bytes (EventHead.Refused says where)
	taskIDEmpty
	taskIDLong
	payloadBig
	attributesMany
	attributesBig
	ttlInvalid // not a valid Duration, or negative
)

// eventFault is why an event was refused, kept as values so that a refusal allocates
// nothing until err formats it: a peer's INVALID items are never formatted.
type eventFault struct {
	code   faultCode
	n, max int // the measure over its bound (bytes, entries), and the bound
}

// readEvent reads b (wire.ReadEvent) and checks each field against the limits, in the
// order of the messages: task_id, payload, attributes, ttl. The attributes count as
// the decoded map does (a repeated key once, its last value).
func (l Limits) readEvent(b []byte) (wire.EventHead, eventFault) {
	h, ok := wire.ReadEvent(b)
	switch n := len(h.TaskID); {
	case !ok:
		return h, eventFault{code: malformed}
	case n == 0:
		return h, eventFault{code: taskIDEmpty}
	case n > l.MaxTaskIDBytes:
		return h, eventFault{code: taskIDLong, n: n, max: l.MaxTaskIDBytes}
	}
	if h.Payload > l.MaxEventBytes {
		return h, eventFault{code: payloadBig, n: h.Payload, max: l.MaxEventBytes}
	}
	attrs, attrBytes := h.Attributes, h.AttributeBytes // as on the wire; exact unless a key repeats
	if attrs > l.MaxAttributes || attrBytes > l.MaxAttributeBytes {
		attrs, attrBytes = wire.DistinctAttributes(b) // rare: count as the decoded map does
	}
	switch {
	case attrs > l.MaxAttributes:
		return h, eventFault{code: attributesMany, n: attrs, max: l.MaxAttributes}
	case attrBytes > l.MaxAttributeBytes:
		return h, eventFault{code: attributesBig, n: attrBytes, max: l.MaxAttributeBytes}
	case !nonNegativeDuration(h.TTLSeconds, h.TTLNanos):
		return h, eventFault{code: ttlInvalid}
	}
	return h, eventFault{}
}

// err is f as the error of event i, whose head is h.
func (f eventFault) err(i int, h *wire.EventHead) *InvalidError {
	field := func(name string) string { return fmt.Sprintf("events[%d].%s", i, name) }
	switch f.code {
	case malformed:
		return Invalid(fmt.Sprintf("events[%d]", i), "not a valid fanout.v1.Event: %s", refusedWhy(h.Refused))
	case taskIDEmpty:
		return Invalid(field("task_id"), "empty")
	case taskIDLong:
		return Invalid(field("task_id"), "%d bytes, at most %d", f.n, f.max)
	case payloadBig:
		return Invalid(field("payload"), "%d bytes, at most %d (--max-event-bytes)", f.n, f.max)
	case attributesMany:
		return Invalid(field("attributes"), "%d entries, at most %d", f.n, f.max)
	case attributesBig:
		return Invalid(field("attributes"), "%d bytes of keys and values, at most %d", f.n, f.max)
	case ttlInvalid:
		return durationFault(field("ttl"), h.TTLSeconds, h.TTLNanos, "use 0 for the node default")
	}
	return nil
}

// refusedWhy says what protobuf refuses in an event, from wire.EventHead.Refused.
func refusedWhy(field protowire.Number) string {
	switch field {
	case wire.EventTaskID:
		return "task_id is not valid UTF-8"
	case wire.EventAttributes:
		return "an attributes entry is malformed, or a key or value is not valid UTF-8"
	case wire.EventTTL:
		return "ttl is not a google.protobuf.Duration"
	}
	return "its bytes are not a protobuf message (a tag, a length or a varint is cut short or invalid)"
}

// maxDurationSeconds is google/protobuf/duration.proto's range: ±10,000 years
// (315,576,000,000 seconds).
const maxDurationSeconds = 315_576_000_000

// nonNegativeDuration reports whether a google.protobuf.Duration, as its two varints
// read (seconds an int64, nanos an int32, in two's complement), is valid by
// durationpb's CheckValid and not negative (AsDuration() >= 0). It is that rule
// written for the non-negative half, not a copy of CheckValid: CheckValid accepts
// |seconds| <= maxDurationSeconds and |nanos| < 1e9 with seconds and nanos not of
// opposite signs, and such a Duration is negative exactly when either is, so the
// non-negative valid ones are 0 <= seconds <= maxDurationSeconds, 0 <= nanos < 1e9.
// FuzzReadSubmit and FuzzReadEvent check it against CheckValid and AsDuration. Only
// on a refusal does durationFault ask durationpb for its words.
func nonNegativeDuration(secs, nanos uint64) bool {
	s, n := int64(secs), int32(nanos)
	return s >= 0 && s <= maxDurationSeconds && n >= 0 && n < 1e9
}

// TTL is the ttl of the event read into h, as durationpb's AsDuration gives it; 0
// without one.
func TTL(h *wire.EventHead) time.Duration { return asDuration(h.TTLSeconds, h.TTLNanos) }

// asDuration is a Duration's value as durationpb's AsDuration gives it (saturated).
func asDuration(secs, nanos uint64) time.Duration {
	d := durationpb.Duration{Seconds: int64(secs), Nanos: int32(nanos)}
	return d.AsDuration()
}

// durationFault is the error of field, a Duration nonNegativeDuration refused: in
// durationpb's words if CheckValid refuses it, else negative, with hint.
func durationFault(field string, secs, nanos uint64, hint string) *InvalidError {
	d := &durationpb.Duration{Seconds: int64(secs), Nanos: int32(nanos)}
	if err := d.CheckValid(); err != nil {
		return Invalid(field, "%v", err)
	}
	return Invalid(field, "negative (%s); %s", d.AsDuration(), hint)
}
