package store

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Bounds on a record, in bytes. Commit refuses a record past them and decodeValue a
// value past them. They are the sidecar's own bounds, so that whatever a
// node accepts it can also keep.
const (
	// MaxKeyBytes bounds a task_id: the API's bound (fanout.Limits.MaxTaskIDBytes).
	MaxKeyBytes = 1024
	// MaxOriginBytes bounds an origin node id, and the node id of SetNodeID: the bound
	// a receiver puts on ReplicateRequest.origin_node (fanout.Limits.MaxTaskIDBytes).
	// Its length takes two bytes on disk.
	MaxOriginBytes = 1024
	// MaxRawBytes bounds an encoded event. A node never takes a bigger one: an event
	// is held to fanout.Limits.EventBytes as encoded, and --max-event-bytes is refused
	// if that could pass this. pebble takes values up to 4 GiB.
	MaxRawBytes = 1 << 30
)

// The value of a record key, format 1:
//
//	[0]        format: 1
//	[1]        flags: bit 0 = deleted; the other bits are 0
//	[2:10]     version, big-endian uint64
//	[10:18]    submitted, big-endian int64 (unix nanos at the origin)
//	[18:20]    n = len(origin), big-endian uint16, 0..MaxOriginBytes
//	[20:20+n]  origin
//	[20+n:]    raw: the encoded fanout.v1.Event, 0..MaxRawBytes
//
// Every field has a fixed place or an explicit length, so a value has exactly one
// encoding: decodeValue(v) succeeds only on what appendValue made, and appendValue
// of what it decoded gives v back.
const (
	formatV1     = 1
	flagDeleted  = 1 << 0
	valueHeader  = 20
	knownFlagsV1 = flagDeleted
)

// errValue is wrapped by every decoding error.
var errValue = errors.New("store: bad record value")

// value is a decoded record value. origin and raw alias the bytes decoded.
type value struct {
	version   uint64
	submitted int64
	deleted   bool
	origin    []byte
	raw       []byte
}

// appendValue appends r's value (format 1) to dst. r is valid (validate).
func appendValue(dst []byte, r *Record) []byte {
	var flags byte
	if r.Deleted {
		flags |= flagDeleted
	}
	dst = append(dst, formatV1, flags)
	dst = binary.BigEndian.AppendUint64(dst, r.Version)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Submitted))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(r.Origin)))
	dst = append(dst, r.Origin...)
	return append(dst, r.Raw...)
}

// decodeValue decodes a value made by appendValue. It never panics: anything else is
// an error wrapping errValue.
func decodeValue(b []byte) (value, error) {
	if len(b) < valueHeader {
		return value{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", errValue, len(b), valueHeader)
	}
	if b[0] != formatV1 {
		return value{}, fmt.Errorf("%w: format %d, this build reads format %d", errValue, b[0], formatV1)
	}
	if b[1]&^knownFlagsV1 != 0 {
		return value{}, fmt.Errorf("%w: unknown flags %#x", errValue, b[1])
	}
	n := int(binary.BigEndian.Uint16(b[18:20]))
	if n > MaxOriginBytes {
		return value{}, fmt.Errorf("%w: origin of %d bytes, over %d", errValue, n, MaxOriginBytes)
	}
	if len(b) < valueHeader+n {
		return value{}, fmt.Errorf("%w: origin of %d bytes, only %d left", errValue, n, len(b)-valueHeader)
	}
	raw := b[valueHeader+n:]
	if len(raw) > MaxRawBytes {
		return value{}, fmt.Errorf("%w: event of %d bytes, over %d", errValue, len(raw), MaxRawBytes)
	}
	return value{
		version:   binary.BigEndian.Uint64(b[2:10]),
		submitted: int64(binary.BigEndian.Uint64(b[10:18])),
		deleted:   b[1]&flagDeleted != 0,
		origin:    b[valueHeader : valueHeader+n],
		raw:       raw,
	}, nil
}
