package fanout

import (
	"fmt"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/store"
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
}

// DefaultLimits returns the limits of SPEC §10.
func DefaultLimits() Limits {
	return Limits{
		MaxTaskIDBytes:    1024,
		MaxEventBytes:     1 << 20,
		MaxAttributes:     64,
		MaxAttributeBytes: 16 << 10,
		MaxEvents:         10000,
	}
}

// MaxMessageBytes is the gRPC receive limit that matches these limits for a request of
// maxEvents events: a request that stays within Limits always fits. It is capped at
// 1 GiB; a request bigger than that is refused by gRPC (RESOURCE_EXHAUSTED) before it
// is decoded.
func (l Limits) MaxMessageBytes(maxEvents int) int {
	perEvent := int64(l.MaxTaskIDBytes) + int64(l.MaxEventBytes) + int64(l.MaxAttributeBytes) +
		int64(l.MaxAttributes)*8 + 64 // tags, lengths, version, ttl
	total := perEvent*int64(maxEvents) + 4096
	return int(min(total, 1<<30))
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

// validateSubmit checks a whole SubmitRequest before any of it is applied.
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
