package event

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Limits are the input bounds of an event and of a Submit request, enforced on both
// listeners and on what anti-entropy brings.
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

// DefaultLimits returns the limits, each with its reason.
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
// bytes the app sent and the version the node appends if it has none (ReadSubmit),
// on the peer path as it arrived (ReadEvent). So unknown fields, and
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

// InvalidError is a rejected request. Its message names the field and event index,
// e.g. "events[3].task_id: empty"; the gRPC edge turns it into INVALID_ARGUMENT.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

// Invalid returns the InvalidError of field, with Reason fmt.Sprintf(format, args...).
func Invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
