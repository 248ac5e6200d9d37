package fanout

import (
	"errors"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/protobuf/encoding/protowire"
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
	subscribeEvent     = 1
	subscribeOrigin    = 2
	subscribeSubmitted = 3
	subscribeBatch     = 4
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

// eventHead is what a receiver reads of one event.
type eventHead struct {
	taskID  []byte // aliases the event's bytes, at taskOff
	taskOff int
	version uint64
}

// readEvent reads an Event's task_id and version and checks it against the limits
// exactly as validateEvent checks the decoded Event, with protobuf's decoding rules: a
// string must be UTF-8, a repeated scalar keeps its last value, a repeated message
// merges, a known field number with another wire type is an unknown field, and map
// entries with the same key keep the last. It reports false for an event to answer
// INVALID. FuzzReadEvent compares it with proto.Unmarshal plus validateEvent.
func (l Limits) readEvent(b []byte) (eventHead, bool) {
	var h eventHead
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
		case typ == protowire.VarintType && num == eventVersion:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return h, false
			}
			h.version, b = v, b[n:]
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

// ownEvent copies the bytes of the event read as h out of the request frame, which is
// reused, and returns them with the task_id as a string that shares the copy (the bytes
// are never written again). One allocation per admitted event.
func ownEvent(raw []byte, h eventHead) ([]byte, string) {
	own := append([]byte(nil), raw...)
	return own, unsafe.String(&own[h.taskOff], len(h.taskID))
}

// appendSubscribe appends one SubscribeResponse carrying d to b.
func appendSubscribe(b []byte, d *delivery) []byte {
	b = protowire.AppendTag(b, subscribeEvent, protowire.BytesType)
	b = protowire.AppendBytes(b, d.raw)
	if d.origin != "" {
		b = protowire.AppendTag(b, subscribeOrigin, protowire.BytesType)
		b = protowire.AppendString(b, d.origin)
	}
	if d.submitted != 0 {
		secs, nanos := d.submitted/1e9, d.submitted%1e9
		if nanos < 0 { // Timestamp nanos are never negative
			secs, nanos = secs-1, nanos+1e9
		}
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
	return b
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

// subscribeSize is the encoded size of appendSubscribe(nil, d).
func subscribeSize(d *delivery) int {
	n := 1 + protowire.SizeBytes(len(d.raw))
	if d.origin != "" {
		n += 1 + protowire.SizeBytes(len(d.origin))
	}
	if d.submitted != 0 {
		secs, nanos := d.submitted/1e9, d.submitted%1e9
		if nanos < 0 {
			secs, nanos = secs-1, nanos+1e9
		}
		n += 1 + protowire.SizeBytes(timestampSize(secs, nanos))
	}
	return n
}

// appendSubscribeBatch appends one SubscribeResponse whose batch field carries ds.
func appendSubscribeBatch(b []byte, ds []delivery) []byte {
	for i := range ds {
		b = protowire.AppendTag(b, subscribeBatch, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(subscribeSize(&ds[i])))
		b = appendSubscribe(b, &ds[i])
	}
	return b
}
