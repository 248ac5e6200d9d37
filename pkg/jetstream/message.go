package jetstream

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/state"
	"github.com/nats-io/nats.go"
)

// The headers of a message of the stream. The value is the event's bytes as the node
// stores them (a fanout.v1.Event); the headers repeat what the engine must compare
// without decoding it (the version) and what the event does not carry (its origin
// and when the origin accepted it).
const (
	// HeaderVersion is the event's version, in decimal.
	HeaderVersion = "Fanout-Version"
	// HeaderOrigin is the node that accepted the event (1..fanout.MaxNodeIDBytes).
	HeaderOrigin = "Fanout-Origin"
	// HeaderSubmittedAt is when the origin accepted it, in unix nanoseconds, decimal.
	HeaderSubmittedAt = "Fanout-Submitted-At"
	// HeaderOperation is the KV format's operation: absent for a value, "DEL" for a
	// delete marker (an event with deleted set), as `nats kv` writes and reads it.
	// "PURGE" is `nats kv purge`'s, which this transport never writes.
	HeaderOperation = "KV-Operation"
	opDelete        = "DEL"
)

// message is one event as the stream holds it: the fields of a SyncEntry, and the
// facts of its head the engine and the feed need.
type message struct {
	Raw         []byte // the event's bytes (fanout.v1.Event)
	TaskID      string
	Stamp       state.Stamp
	SubmittedAt int64 // unix nanos at the origin
	Deleted     bool
}

// encodeHeader is the header of m: the headers above, with a delete marker's
// operation.
func encodeHeader(m *message) nats.Header {
	h := make(nats.Header, 4)
	h.Set(HeaderVersion, strconv.FormatUint(m.Stamp.Version, 10))
	h.Set(HeaderOrigin, m.Stamp.Origin)
	h.Set(HeaderSubmittedAt, strconv.FormatInt(m.SubmittedAt, 10))
	if m.Deleted {
		h.Set(HeaderOperation, opDelete)
	}
	return h
}

// errMessage is the class of a message of the stream that is not an event this
// transport wrote (a garbage header, a `nats kv put` of other bytes).
var errMessage = errors.New("jetstream: not a fanout message")

// decodeMessage reads the message of the KV key key, with header h and value data.
// It is the one reader of the stream's messages: it checks that the headers are
// well-formed, that the value is an event (wire.ReadEvent: protobuf's rules; the
// node's limits are Apply's to check), and that the headers agree with it (task_id
// and key, version, deleted and operation), and names the header or field that does
// not. m.Raw aliases data.
func decodeMessage(key string, h nats.Header, data []byte) (message, error) {
	var m message
	taskID, err := decodeKey(key)
	if err != nil {
		return m, fmt.Errorf("%w: subject: %w", errMessage, err)
	}
	one := func(name string) (string, error) {
		switch v := h.Values(name); len(v) {
		case 0:
			return "", fmt.Errorf("%w: header %s: missing", errMessage, name)
		case 1:
			return v[0], nil
		default:
			return "", fmt.Errorf("%w: header %s: %d values, want 1", errMessage, name, len(v))
		}
	}
	ver, err := one(HeaderVersion)
	if err != nil {
		return m, err
	}
	if m.Stamp.Version, err = strconv.ParseUint(ver, 10, 64); err != nil || ver[0] == '+' {
		return m, fmt.Errorf("%w: header %s: %q is not a decimal uint64", errMessage, HeaderVersion, ver)
	}
	if m.Stamp.Origin, err = one(HeaderOrigin); err != nil {
		return m, err
	}
	if n := len(m.Stamp.Origin); n == 0 || n > fanout.MaxNodeIDBytes {
		return m, fmt.Errorf("%w: header %s: %d bytes, want 1..%d", errMessage, HeaderOrigin, n, fanout.MaxNodeIDBytes)
	}
	at, err := one(HeaderSubmittedAt)
	if err != nil {
		return m, err
	}
	if m.SubmittedAt, err = strconv.ParseInt(at, 10, 64); err != nil || at[0] == '+' {
		return m, fmt.Errorf("%w: header %s: %q is not a decimal int64", errMessage, HeaderSubmittedAt, at)
	}
	switch op := h.Values(HeaderOperation); {
	case len(op) == 0:
	case len(op) == 1 && op[0] == opDelete:
		m.Deleted = true
	default:
		return m, fmt.Errorf("%w: header %s: %q, want none or %q", errMessage, HeaderOperation, op, opDelete)
	}
	head, ok := wire.ReadEvent(data)
	switch {
	case !ok:
		return m, fmt.Errorf("%w: value: not a fanout.v1.Event (%d bytes)", errMessage, len(data))
	case string(head.TaskID) != taskID:
		return m, fmt.Errorf("%w: value: task_id %q, the subject's is %q", errMessage, head.TaskID, taskID)
	case head.Version != m.Stamp.Version:
		return m, fmt.Errorf("%w: header %s: %d, the event's version is %d", errMessage, HeaderVersion, m.Stamp.Version, head.Version)
	case head.Deleted != m.Deleted:
		return m, fmt.Errorf("%w: header %s: a delete marker is %q exactly when the event is deleted (event deleted: %t)",
			errMessage, HeaderOperation, opDelete, head.Deleted)
	}
	m.Raw, m.TaskID = data, taskID
	return m, nil
}

// messageOf is the message of an accepted event: t's Value is the event's bytes and
// version, as the node stored them.
func messageOf(origin string, raw []byte, version uint64, submittedAt int64) (message, error) {
	head, ok := wire.ReadEvent(raw)
	if !ok || len(head.TaskID) == 0 {
		return message{}, fmt.Errorf("jetstream: an accepted event is not a fanout.v1.Event with a task_id (%d bytes)", len(raw))
	}
	return message{Raw: raw, TaskID: string(head.TaskID), Stamp: state.Stamp{Version: version, Origin: origin},
		SubmittedAt: submittedAt, Deleted: head.Deleted}, nil
}
