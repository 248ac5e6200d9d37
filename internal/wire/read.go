package wire

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrMalformed is returned for bytes that are not a valid protobuf message of the
// type being read.
var ErrMalformed = errors.New("wire: not a valid protobuf message")

// ConsumeTag is protowire.ConsumeTag that also refuses a field number above
// protowire.MaxValidNumber, as protobuf's decoder does. Every reader here reads tags
// with it.
func ConsumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// ReadSecondsNanos merges one google.protobuf.Duration or Timestamp message (both are
// seconds = 1, nanos = 2) into secs and nanos, as protobuf merges a repeated message
// field. It reports false for malformed bytes.
func ReadSecondsNanos(b []byte, secs, nanos *uint64) bool {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == DurationSeconds || num == DurationNanos) {
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			if num == DurationSeconds {
				*secs = x
			} else {
				*nanos = x
			}
			b = b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// Replicate is a fanout.v1.ReplicateRequest read from its bytes by ParseReplicate.
// Events are the events' bytes as their origin encoded them, undecoded.
type Replicate struct {
	Origin    string
	Events    [][]byte // alias the request's bytes
	Submitted []int64  // unix nanos, one per event, or none
}

// ParseReplicate reads a ReplicateRequest into r, appending to its Events and
// Submitted. Unknown fields are skipped, as protobuf does; submitted_at_unix_nanos is
// read packed or not, as protobuf does. It returns ErrMalformed for bytes protobuf
// would refuse (origin_node not UTF-8 included); an event's own bytes are read later,
// by ReadEvent.
func ParseReplicate(b []byte, r *Replicate) error {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		switch {
		case num == ReplicateRequestOriginNode && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return ErrMalformed
			}
			r.Origin, b = string(v), b[n:]
		case num == ReplicateRequestEvents && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ErrMalformed
			}
			r.Events, b = append(r.Events, v), b[n:]
		case num == ReplicateRequestSubmittedAtUnixNanos:
			var n int
			if r.Submitted, n = appendVarints(r.Submitted, num, typ, b); n < 0 {
				return ErrMalformed
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return ErrMalformed
			}
			b = b[n:]
		}
	}
	return nil
}

// appendVarints reads one occurrence, with wire type typ, of the repeated varint field
// num, packed (BytesType) or not (VarintType), and appends its values to dst, as
// protobuf does; with another wire type the field is unknown and skipped. It returns
// the bytes read, or a negative number for malformed bytes.
func appendVarints[T ~int64 | ~uint64](dst []T, num protowire.Number, typ protowire.Type, b []byte) ([]T, int) {
	switch typ {
	case protowire.VarintType:
		x, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return dst, n
		}
		return append(dst, T(x)), n
	case protowire.BytesType:
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return dst, n
		}
		for len(v) > 0 {
			x, m := protowire.ConsumeVarint(v)
			if m < 0 {
				return dst, m
			}
			dst, v = append(dst, T(x)), v[m:]
		}
		return dst, n
	}
	return dst, protowire.ConsumeFieldValue(num, typ, b)
}

// EventHead is what ReadEvent reads of one encoded fanout.v1.Event: the fields a
// receiver stores the event by, and the sizes it checks the event's limits with.
type EventHead struct {
	TaskID  []byte // the task_id protobuf keeps (the last); aliases the event's bytes at TaskOff
	TaskOff int
	Version uint64
	Deleted bool
	// Payload is the length of the payload protobuf keeps.
	Payload int
	// Attributes and AttributeBytes (keys and values) count the attributes map's
	// entries as they are on the wire: exact unless a key repeats, when the decoded map
	// holds fewer (DistinctAttributes counts those).
	Attributes, AttributeBytes int
	// TTLSeconds and TTLNanos are the ttl merged over every ttl field, as their varints
	// read (int64 and int32 in two's complement); both 0 without a ttl.
	TTLSeconds, TTLNanos uint64
	// Refused, when ReadEvent reports false, is the field whose content protobuf
	// refuses: EventTaskID (not UTF-8), EventAttributes (an entry malformed or not
	// UTF-8) or EventTTL (a malformed Duration); 0 for broken framing (a tag, a
	// length or a varint cut short or invalid).
	Refused protowire.Number
}

// ReadEvent reads an Event with protobuf's decoding rules: a string must be UTF-8, a
// repeated scalar keeps its last value, a repeated message merges, a known field
// number with another wire type is an unknown field. It reports false for bytes
// protobuf would refuse, with EventHead.Refused naming the field. It does not allocate.
func ReadEvent(b []byte) (EventHead, bool) {
	var h EventHead
	whole := b
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return h, false
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == EventTaskID || num == EventPayload || num == EventAttributes || num == EventTTL):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return h, false
			}
			b = b[n:]
			switch num {
			case EventTaskID:
				if !utf8.Valid(v) { // protobuf refuses every bad occurrence, not only the last
					h.Refused = EventTaskID
					return h, false
				}
				h.TaskID, h.TaskOff = v, len(whole)-len(b)-len(v)
			case EventPayload:
				h.Payload = len(v)
			case EventAttributes:
				k, val, ok := readAttribute(v)
				if !ok {
					h.Refused = EventAttributes
					return h, false
				}
				h.Attributes++
				h.AttributeBytes += len(k) + len(val)
			case EventTTL:
				if !ReadSecondsNanos(v, &h.TTLSeconds, &h.TTLNanos) {
					h.Refused = EventTTL
					return h, false
				}
			}
		case typ == protowire.VarintType && (num == EventVersion || num == EventDeleted):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return h, false
			}
			if num == EventVersion {
				h.Version = v
			} else {
				h.Deleted = v != 0
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
	return h, true
}

// readAttribute reads one attributes map entry (both strings UTF-8).
func readAttribute(b []byte) (key, val []byte, ok bool) {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return nil, nil, false
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != AttributesEntryKey && num != AttributesEntryValue) {
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
		if num == AttributesEntryKey {
			key = v
		} else {
			val = v
		}
	}
	return key, val, utf8.Valid(key) && utf8.Valid(val)
}

// DistinctAttributes counts an event's attributes as the decoded map holds them: one
// entry per key, the last value winning. It allocates; call it only for an event
// ReadEvent accepted (it does not check the bytes again), and only when
// EventHead.Attributes or AttributeBytes is over a limit.
func DistinctAttributes(b []byte) (count, size int) {
	m := map[string]string{}
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		b = b[n:]
		if num == EventAttributes && typ == protowire.BytesType {
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

// TaskIDOffset is where the last task_id field's bytes start in an encoded Event (the
// one protobuf keeps), or -1.
func TaskIDOffset(b []byte) int {
	off, whole := -1, len(b)
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return -1
		}
		b = b[n:]
		if num == EventTaskID && typ == protowire.BytesType {
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
