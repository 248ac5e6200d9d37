package fanout

import (
	"sync"

	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
)

// The receive path is pass-through: a replicated event stays in the bytes its origin
// encoded, from the Replicate request to the Subscribe message. A receiver reads only
// what it decides on (task_id, version, and the fields it validates) with the readers
// of internal/wire, copies the event's bytes once, and writes them into Subscribe
// messages unchanged (wire.AppendEntry). This file is the node's side of that: the
// limits an event read from its bytes is held to, and table entries as wire entries.
// frame.Frame carries such bytes through gRPC.

// framePool recycles frames: the requests of Replicate and Submit calls and of
// replicate streams, and the batches a link builds.
var framePool = sync.Pool{New: func() any { return new(frame.Frame) }}

// putFrame gives f back to framePool, unless it holds a huge request's buffer.
func putFrame(f *frame.Frame) {
	if cap(f.B) <= 4<<20 {
		framePool.Put(f)
	}
}

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

// readEvent reads an Event's task_id and version (wire.ReadEvent) and checks it against
// the limits exactly as validateEvent checks the decoded Event, with protobuf's
// decoding rules: a string must be UTF-8, a repeated scalar keeps its last value, a
// repeated message merges, a known field number with another wire type is an unknown
// field, and map entries with the same key keep the last. The event as a whole, as it
// arrived, is held to EventBytes: unknown and repeated fields count. It reports false
// for an event to answer INVALID. FuzzReadEvent compares it with proto.Unmarshal plus
// validateEvent and the size.
func (l Limits) readEvent(b []byte) (wire.EventHead, bool) {
	if len(b) > l.EventBytes() {
		return wire.EventHead{}, false
	}
	h, ok := wire.ReadEvent(b)
	if !ok {
		return h, false
	}
	attrs, attrBytes := h.Attributes, h.AttributeBytes // as on the wire; exact unless a key repeats
	if attrs > l.MaxAttributes || attrBytes > l.MaxAttributeBytes {
		attrs, attrBytes = wire.DistinctAttributes(b) // rare: count as the decoded map does
	}
	ok = len(h.TaskID) > 0 && len(h.TaskID) <= l.MaxTaskIDBytes &&
		h.Payload <= l.MaxEventBytes && attrs <= l.MaxAttributes && attrBytes <= l.MaxAttributeBytes &&
		validDuration(int64(h.TTLSeconds), int64(int32(h.TTLNanos)))
	return h, ok
}

// validDuration is durationpb's CheckValid, and not negative (validateEvent's ttl rule).
func validDuration(secs, nanos int64) bool {
	const maxSecs = 315576000000
	switch {
	case secs < -maxSecs || secs > maxSecs, nanos <= -1e9 || nanos >= 1e9,
		secs > 0 && nanos < 0 || secs < 0 && nanos > 0:
		return false
	}
	return secs >= 0 && nanos >= 0
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
