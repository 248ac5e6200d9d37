package fanout

import (
	"errors"
	"sync"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The receive path is pass-through: a replicated event stays in the bytes its origin
// encoded, from the Replicate request to the Subscribe message. A receiver reads only
// what it decides on (task_id, version, and the fields it validates) with protowire,
// copies the event's bytes once, and writes them into Subscribe messages unchanged.
// Decoding every event into an Event (its struct, strings, payload, map) and encoding
// it again for each subscriber was a third of a saturated receiver's CPU, most of it GC.
// The wire format is fanout.v1's; peers and apps see no difference. peers.Frame carries
// such bytes through gRPC.

// framePool recycles the request frames of Replicate calls.
var framePool = sync.Pool{New: func() any { return new(peers.Frame) }}

// Field numbers of fanout.v1 messages (proto/fanout/v1/*.proto).
const (
	replicateOrigin    = 1
	replicateEvents    = 2
	replicateSubmitted = 3
	eventTaskID        = 1
	eventPayload       = 2
	eventAttributes    = 3
	eventVersion       = 4
	eventTTL           = 5
	eventDeleted       = 6
	subscribeEvent     = 1 // also Entry's
	subscribeOrigin    = 2 // also Entry's
	subscribeSubmitted = 3 // also Entry's
	subscribeRevision  = 5 // also Entry's
	subscribeBatch     = 6
	subscribeComplete  = 7
)

// rawReplicate is a ReplicateRequest read from its bytes. events alias the frame.
type rawReplicate struct {
	origin    string
	events    [][]byte
	submitted []int64
}

var errMalformed = errors.New("not a valid protobuf message")

// parseReplicate reads a ReplicateRequest. Unknown fields are skipped, as protobuf does.
func parseReplicate(b []byte, r *rawReplicate) error {
	for len(b) > 0 {
		num, typ, n := peers.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		switch {
		case num == replicateOrigin && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return errMalformed
			}
			r.origin, b = string(v), b[n:]
		case num == replicateEvents && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformed
			}
			r.events, b = append(r.events, v), b[n:]
		case num == replicateSubmitted && typ == protowire.BytesType: // packed
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformed
			}
			for len(v) > 0 {
				x, m := protowire.ConsumeVarint(v)
				if m < 0 {
					return errMalformed
				}
				r.submitted, v = append(r.submitted, int64(x)), v[m:]
			}
			b = b[n:]
		case num == replicateSubmitted && typ == protowire.VarintType: // unpacked
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformed
			}
			r.submitted, b = append(r.submitted, int64(x)), b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errMalformed
			}
			b = b[n:]
		}
	}
	return nil
}

// cachedSize reads an event's encoded size from protobuf's size cache. Node.prepare
// has just encoded every event it offers, after the last change to it (its version),
// which filled the cache; nothing changes an event after that.
var cachedSize = proto.MarshalOptions{UseCachedSize: true}

// eventItemBytes is what ev adds to a ReplicateRequest: the batcher's Config.Size, so
// that a batch of MaxBatchBytes is a request of at most that plus messageOverhead,
// and pending's bytes are what would be sent.
func eventItemBytes(ev *fanoutv1.Event) int { return replicateItemBytes(cachedSize.Size(ev)) }

// eventHead is what a receiver reads of one event.
type eventHead struct {
	taskID  []byte // aliases the event's bytes, at taskOff
	taskOff int
	version uint64
	deleted bool
}

// readEvent reads an Event's task_id and version and checks it against the limits
// exactly as validateEvent checks the decoded Event, with protobuf's decoding rules: a
// string must be UTF-8, a repeated scalar keeps its last value, a repeated message
// merges, a known field number with another wire type is an unknown field, and map
// entries with the same key keep the last. The event as a whole, as it arrived, is
// held to EventBytes: unknown and repeated fields count. It reports false for an event
// to answer INVALID. FuzzReadEvent compares it with proto.Unmarshal plus validateEvent
// and the size.
func (l Limits) readEvent(b []byte) (eventHead, bool) {
	var h eventHead
	if len(b) > l.EventBytes() {
		return h, false
	}
	payload := 0
	attrs, attrBytes := 0, 0     // as on the wire; exact unless a key repeats
	var ttlSecs, ttlNanos uint64 // merged over every ttl field
	whole := b
	for len(b) > 0 {
		num, typ, n := peers.ConsumeTag(b)
		if n < 0 {
			return h, false
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == eventTaskID || num == eventPayload || num == eventAttributes || num == eventTTL):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return h, false
			}
			b = b[n:]
			switch num {
			case eventTaskID:
				if !utf8.Valid(v) { // protobuf refuses every bad occurrence, not only the last
					return h, false
				}
				h.taskID, h.taskOff = v, len(whole)-len(b)-len(v)
			case eventPayload:
				payload = len(v)
			case eventAttributes:
				k, val, ok := readAttribute(v)
				if !ok {
					return h, false
				}
				attrs++
				attrBytes += len(k) + len(val)
			case eventTTL:
				if !peers.ReadSecondsNanos(v, &ttlSecs, &ttlNanos) {
					return h, false
				}
			}
		case typ == protowire.VarintType && (num == eventVersion || num == eventDeleted):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return h, false
			}
			if num == eventVersion {
				h.version = v
			} else {
				h.deleted = v != 0
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return h, false
			}
			b = b[n:]
		}
	}
	if attrs > l.MaxAttributes || attrBytes > l.MaxAttributeBytes {
		attrs, attrBytes = distinctAttributes(whole) // rare: count as the decoded map does
	}
	ok := len(h.taskID) > 0 && len(h.taskID) <= l.MaxTaskIDBytes &&
		payload <= l.MaxEventBytes && attrs <= l.MaxAttributes && attrBytes <= l.MaxAttributeBytes &&
		validDuration(int64(ttlSecs), int64(int32(ttlNanos)))
	return h, ok
}

// readAttribute reads one map entry (key 1, value 2, both UTF-8 strings).
func readAttribute(b []byte) (key, val []byte, ok bool) {
	for len(b) > 0 {
		num, typ, n := peers.ConsumeTag(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != 1 && num != 2) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, nil, false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		if num == 1 {
			key = v
		} else {
			val = v
		}
	}
	return key, val, utf8.Valid(key) && utf8.Valid(val)
}

// distinctAttributes counts an event's attributes as the decoded map holds them: one
// entry per key, the last value winning. The event was already read once.
func distinctAttributes(b []byte) (count, size int) {
	m := map[string]string{}
	for len(b) > 0 {
		num, typ, n := peers.ConsumeTag(b)
		b = b[n:]
		if num == eventAttributes && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			k, val, _ := readAttribute(v)
			m[string(k)] = string(val)
			b = b[n:]
			continue
		}
		b = b[protowire.ConsumeFieldValue(num, typ, b):]
	}
	for k, v := range m {
		size += len(k) + len(v)
	}
	return len(m), size
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

// keyOffset is where the last task_id field's bytes start in an encoded Event (the
// one protobuf keeps), or -1.
func keyOffset(b []byte) int {
	off, whole := -1, len(b)
	for len(b) > 0 {
		num, typ, n := peers.ConsumeTag(b)
		if n < 0 {
			return -1
		}
		b = b[n:]
		if num == eventTaskID && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return -1
			}
			off = whole - len(b) + (m - len(v))
			b = b[m:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return -1
		}
		b = b[n:]
	}
	return off
}

// appendEntry appends the fields of one Entry (or a one-entry SubscribeResponse,
// whose field numbers are the same) carrying e to b.
func appendEntry(b []byte, e *state.Entry) []byte {
	b = protowire.AppendTag(b, subscribeEvent, protowire.BytesType)
	b = protowire.AppendBytes(b, e.Raw)
	if e.Stamp.Origin != "" {
		b = protowire.AppendTag(b, subscribeOrigin, protowire.BytesType)
		b = protowire.AppendString(b, e.Stamp.Origin)
	}
	if e.Submitted != 0 {
		secs, nanos := splitNanos(e.Submitted)
		b = protowire.AppendTag(b, subscribeSubmitted, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(timestampSize(secs, nanos)))
		if secs != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(secs))
		}
		if nanos != 0 {
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(nanos))
		}
	}
	if e.Revision != 0 {
		b = protowire.AppendTag(b, subscribeRevision, protowire.VarintType)
		b = protowire.AppendVarint(b, e.Revision)
	}
	return b
}

// splitNanos is unix nanos as Timestamp seconds and nanos (never negative).
func splitNanos(ns int64) (secs, nanos int64) {
	secs, nanos = ns/1e9, ns%1e9
	if nanos < 0 {
		secs, nanos = secs-1, nanos+1e9
	}
	return secs, nanos
}

func timestampSize(secs, nanos int64) int {
	n := 0
	if secs != 0 {
		n += 1 + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(nanos))
	}
	return n
}

// entrySize is the encoded size of appendEntry(nil, e).
func entrySize(e *state.Entry) int {
	n := 1 + protowire.SizeBytes(len(e.Raw))
	if e.Stamp.Origin != "" {
		n += 1 + protowire.SizeBytes(len(e.Stamp.Origin))
	}
	if e.Submitted != 0 {
		n += 1 + protowire.SizeBytes(timestampSize(splitNanos(e.Submitted)))
	}
	if e.Revision != 0 {
		n += 1 + protowire.SizeVarint(e.Revision)
	}
	return n
}

// batchItemSize is what e adds to a SubscribeResponse's batch field.
func batchItemSize(e *state.Entry) int { return 1 + protowire.SizeBytes(entrySize(e)) }

// appendBatch appends one SubscribeResponse whose batch field carries es.
func appendBatch(b []byte, es []state.Entry) []byte {
	for i := range es {
		b = protowire.AppendTag(b, subscribeBatch, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(&es[i])))
		b = appendEntry(b, &es[i])
	}
	return b
}

// appendSnapshotComplete appends the SubscribeResponse {snapshot_complete: true}.
func appendSnapshotComplete(b []byte) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, subscribeComplete, protowire.VarintType), 1)
}
