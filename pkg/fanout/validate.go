package fanout

import (
	"fmt"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/store"
	"google.golang.org/protobuf/encoding/protowire"
)

// MaxNodeIDBytes bounds a node id (--node-id, and the origin of every replicated
// event): 1024, as a task_id, and what the data dir stores (store.MaxOriginBytes).
const MaxNodeIDBytes = store.MaxOriginBytes

// Limits are the input bounds of SPEC §10, enforced on both listeners.
type Limits struct {
	// MaxTaskIDBytes bounds task_id. 1024: long enough for "action#app/instance" keys,
	// short enough that a million of them fit the version table comfortably.
	MaxTaskIDBytes int
	// MaxEventBytes bounds one payload. 1 MiB (--max-event-bytes): change events are
	// state, not blobs.
	MaxEventBytes int
	// MaxAttributes bounds the attribute count of one event. 64.
	MaxAttributes int
	// MaxAttributeBytes bounds the attribute keys and values of one event. 16 KiB.
	MaxAttributeBytes int
	// MaxEvents bounds the events of one request. 10000: the pending buffer per peer.
	MaxEvents int
	// MaxRequestBytes bounds one request on the app listener, encoded: gRPC refuses a
	// bigger one with RESOURCE_EXHAUSTED before it decodes any of it
	// (--max-request-bytes). 16 MiB: a request of 10,000 events (MaxEvents) of up to
	// 1.6 KiB each, or of 15 events at the default MaxEventBytes; the sidecar holds
	// about twice a request while it decodes it. At least one event of EventBytes.
	MaxRequestBytes int
}

// DefaultLimits returns the limits of SPEC §10.
func DefaultLimits() Limits {
	return Limits{
		MaxTaskIDBytes:    1024,
		MaxEventBytes:     1 << 20,
		MaxAttributes:     64,
		MaxAttributeBytes: 16 << 10,
		MaxEvents:         10000,
		MaxRequestBytes:   16 << 20,
	}
}

// EventBytes is the most bytes an event within the limits encodes to, tags and
// lengths included: a task_id of MaxTaskIDBytes, a payload of MaxEventBytes,
// MaxAttributes attributes of MaxAttributeBytes in all, a version, a ttl and deleted
// (1,066,787 bytes, 1 MiB + 17.8 KiB, with the defaults). Every event is held to it as
// encoded, beside its fields' own bounds: on the app path as it will be stored, the
// bytes the app sent and the version the node appends if it has none (admitSubmit),
// on the peer path as it arrived (readEvent). So unknown fields, and
// fields repeated on the wire, count: they may take only what the known fields leave,
// and an event can never be bigger than this however it was written.
func (l Limits) EventBytes() int {
	field := func(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }
	a := l.MaxAttributeBytes
	// One map entry's tags and lengths: the entry's, its key's and its value's.
	entry := 1 + protowire.SizeVarint(uint64(a+2+2*protowire.SizeVarint(uint64(a)))) + 2 + 2*protowire.SizeVarint(uint64(a))
	const (
		version = 1 + 10                // tag, a 64-bit varint
		ttl     = 1 + 1 + 1 + 6 + 1 + 5 // tag, length; seconds <= 315576000000, nanos < 1e9
		deleted = 1 + 1
	)
	return field(l.MaxTaskIDBytes) + field(l.MaxEventBytes) + a + l.MaxAttributes*entry + version + ttl + deleted
}

// EntryBytes is the most bytes one entry of the state table takes in a Subscribe
// message or a Get page: an event of EventBytes with its origin (at most
// MaxNodeIDBytes), submitted_at and revision, and the tags and lengths around them. A
// message carries one such entry when it is bigger than the message's cap.
func (l Limits) EntryBytes() int {
	ev := 1 + protowire.SizeVarint(uint64(l.EventBytes())) + l.EventBytes()
	entry := ev + 1 + 2 + MaxNodeIDBytes + (1 + 1 + 1 + 10 + 1 + 5) + (1 + 10) // origin, submitted_at, revision
	return 1 + protowire.SizeVarint(uint64(entry)) + entry
}

// InvalidError is a rejected request. Its message names the field and event index,
// e.g. "events[3].task_id: empty"; the gRPC adapters turn it into INVALID_ARGUMENT.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// validateSubmit checks a decoded SubmitRequest's fields against their bounds. The
// app listener reads requests from their bytes (admitSubmit); it is how
// explainSubmit says what is wrong with one it refused. Each event's size as sent is
// checked there, where the bytes are.
func (l Limits) validateSubmit(req *fanoutv1.SubmitRequest) error {
	if n := len(req.GetEvents()); n > l.MaxEvents {
		return invalid("events", "%d events, at most %d per request; split the batch", n, l.MaxEvents)
	}
	if _, ok := fanoutv1.AckPolicy_name[int32(req.GetAck())]; !ok {
		return invalid("ack", "unknown policy %d", req.GetAck())
	}
	if t := req.GetAckTimeout(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid("ack_timeout", "%v", err)
		}
		if t.AsDuration() < 0 {
			return invalid("ack_timeout", "negative (%s); use 0 for the default", t.AsDuration())
		}
	}
	for i, ev := range req.GetEvents() {
		if err := l.validateEvent(i, ev); err != nil {
			return err
		}
	}
	return nil
}

// validateEvent checks one event; i is its index for the error message.
func (l Limits) validateEvent(i int, ev *fanoutv1.Event) *InvalidError {
	field := func(name string) string { return fmt.Sprintf("events[%d].%s", i, name) }
	if ev == nil {
		return invalid(fmt.Sprintf("events[%d]", i), "null event")
	}
	id := ev.GetTaskId()
	switch {
	case id == "":
		return invalid(field("task_id"), "empty")
	case len(id) > l.MaxTaskIDBytes:
		return invalid(field("task_id"), "%d bytes, at most %d", len(id), l.MaxTaskIDBytes)
	case !utf8.ValidString(id):
		return invalid(field("task_id"), "not valid UTF-8")
	}
	if n := len(ev.GetPayload()); n > l.MaxEventBytes {
		return invalid(field("payload"), "%d bytes, at most %d (--max-event-bytes)", n, l.MaxEventBytes)
	}
	if err := l.validateAttributes(i, ev.GetAttributes()); err != nil {
		return err
	}
	if t := ev.GetTtl(); t != nil {
		if err := t.CheckValid(); err != nil {
			return invalid(field("ttl"), "%v", err)
		}
		if t.AsDuration() < 0 {
			return invalid(field("ttl"), "negative (%s); use 0 for the node default", t.AsDuration())
		}
	}
	return nil
}

// validateAttributes checks the attributes of event i. The field name is formatted
// only for an error: on the hot path a valid event allocates nothing here.
func (l Limits) validateAttributes(i int, attrs map[string]string) *InvalidError {
	field := func() string { return fmt.Sprintf("events[%d].attributes", i) }
	if n := len(attrs); n > l.MaxAttributes {
		return invalid(field(), "%d entries, at most %d", n, l.MaxAttributes)
	}
	total := 0
	for k, v := range attrs {
		total += len(k) + len(v)
	}
	if total > l.MaxAttributeBytes {
		return invalid(field(), "%d bytes of keys and values, at most %d", total, l.MaxAttributeBytes)
	}
	return nil
}
