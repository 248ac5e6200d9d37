package fanout

import (
	"sync"

	"github.com/fanout/fanout/internal/frame"
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

// framePool recycles the frames a link builds its batches in.
var framePool = sync.Pool{New: func() any { return new(frame.Frame) }}

// outEvent is one of this node's own events on its way to the peers: encoded once,
// when Submit stored it in the state table, and sent to every peer as those bytes
// (link.Process embeds them in each Replicate request with wire.AppendReplicate):
// with P peers, one encoding instead of 1 + P.
type outEvent struct {
	raw     []byte // the Event, its version included; never changed after prepare
	version uint64
}

// outItemBytes is what o adds to a ReplicateRequest: the batcher's Config.Size, so
// that a batch of MaxBatchBytes is a request of at most that plus messageOverhead,
// and pending's bytes are what would be sent.
func outItemBytes(o outEvent) int { return replicateItemBytes(len(o.raw)) }

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

// replicateItemBytes is what an event of n encoded bytes adds to a ReplicateRequest:
// its events field (tag, length, the event) and its submitted_at_unix_nanos entry
// (packed, at most 10 bytes).
func replicateItemBytes(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n + 10 }

// messageOverhead is room, in a message's size bound, for its fields other than the
// events it carries: a ReplicateRequest's origin_node (at most MaxNodeIDBytes) and the
// header of its packed submitted_at_unix_nanos; a Push or Pull message's node id.
const messageOverhead = 4 << 10

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
