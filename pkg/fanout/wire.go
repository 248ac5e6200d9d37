package fanout

import (
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/event"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
	"google.golang.org/protobuf/encoding/protowire"
)

// The receive path is pass-through: a replicated event stays in the bytes its origin
// encoded, from the Replicate request to the Subscribe message. A receiver reads only
// what it decides on (task_id, version, and the fields it validates) with the readers
// of internal/wire, copies the event's bytes once, and writes them into Subscribe
// messages unchanged (wire.AppendEntry). This file is the node's side of that: the
// limits an event read from its bytes is held to (package event reads it), and table
// entries as wire entries. At the gRPC edge, internal/frame carries such bytes as
// frames.

// The node's names for the event package's limits and refusals: Config.Limits is an
// event.Limits, and an *InvalidError is what the gRPC edge turns into
// INVALID_ARGUMENT, whichever package found the field wrong.
type (
	Limits       = event.Limits
	InvalidError = event.InvalidError
)

// DefaultLimits returns event.DefaultLimits.
func DefaultLimits() Limits { return event.DefaultLimits() }

// invalid is event.Invalid: the error of a field the node refuses.
func invalid(field, format string, args ...any) *InvalidError {
	return event.Invalid(field, format, args...)
}

// MaxNodeIDBytes bounds a node id (--node-id, and the origin of every replicated
// event): 1024, as a task_id, and what the data dir stores (store.MaxOriginBytes).
const MaxNodeIDBytes = store.MaxOriginBytes

// entryBytes is the most bytes one entry of the state table takes in a Subscribe
// message or a Get page: an event of l.EventBytes with its origin (at most
// MaxNodeIDBytes), submitted_at and revision, and the tags and lengths around them. A
// message carries one such entry when it is bigger than the message's cap.
func entryBytes(l Limits) int {
	ev := 1 + protowire.SizeVarint(uint64(l.EventBytes())) + l.EventBytes()
	entry := ev + 1 + 2 + MaxNodeIDBytes + (1 + 1 + 1 + 10 + 1 + 5) + (1 + 10) // origin, submitted_at, revision
	return 1 + protowire.SizeVarint(uint64(entry)) + entry
}

// wireEntry is the Entry that delivers e.
func wireEntry(e *state.Entry) wire.Entry {
	return wire.Entry{Event: e.Raw, Origin: e.Stamp.Origin, Submitted: e.Submitted, Revision: e.Revision}
}

// batchItemSize is what e adds to a SubscribeResponse's batch field.
func batchItemSize(e *state.Entry) int { return wire.BatchItemSize(wireEntry(e)) }

// appendBatch appends one SubscribeResponse whose batch field carries es.
func appendBatch(b []byte, es []state.Entry) []byte {
	for i := range es {
		b = wire.AppendBatchItem(b, wireEntry(&es[i]))
	}
	return b
}
