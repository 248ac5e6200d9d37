package wire

import "google.golang.org/protobuf/encoding/protowire"

// Entry is one fanout.v1.Entry to write: an event in the bytes its origin encoded and
// the stamp it is delivered with.
type Entry struct {
	Event     []byte // an encoded Event, written unchanged
	Origin    string // origin_node; "" leaves it out
	Submitted int64  // submitted_at in unix nanos; 0 leaves it out
	Revision  uint64 // 0 leaves it out
}

// AppendEntry appends the fields of one Entry carrying e to b. They are also a
// SubscribeResponse delivering e alone: its event, origin_node, submitted_at and
// revision fields have Entry's numbers.
func AppendEntry(b []byte, e Entry) []byte {
	b = protowire.AppendTag(b, EntryEvent, protowire.BytesType)
	b = protowire.AppendBytes(b, e.Event)
	if e.Origin != "" {
		b = protowire.AppendTag(b, EntryOriginNode, protowire.BytesType)
		b = protowire.AppendString(b, e.Origin)
	}
	if e.Submitted != 0 {
		secs, nanos := SplitNanos(e.Submitted)
		b = protowire.AppendTag(b, EntrySubmittedAt, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(timestampSize(secs, nanos)))
		if secs != 0 {
			b = protowire.AppendTag(b, TimestampSeconds, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(secs))
		}
		if nanos != 0 {
			b = protowire.AppendTag(b, TimestampNanos, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(nanos))
		}
	}
	if e.Revision != 0 {
		b = protowire.AppendTag(b, EntryRevision, protowire.VarintType)
		b = protowire.AppendVarint(b, e.Revision)
	}
	return b
}

// SplitNanos is unix nanos as Timestamp seconds and nanos (never negative).
func SplitNanos(ns int64) (secs, nanos int64) {
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

// EntrySize is the encoded size of AppendEntry(nil, e).
func EntrySize(e Entry) int {
	n := 1 + protowire.SizeBytes(len(e.Event))
	if e.Origin != "" {
		n += 1 + protowire.SizeBytes(len(e.Origin))
	}
	if e.Submitted != 0 {
		n += 1 + protowire.SizeBytes(timestampSize(SplitNanos(e.Submitted)))
	}
	if e.Revision != 0 {
		n += 1 + protowire.SizeVarint(e.Revision)
	}
	return n
}

// BatchItemSize is what e adds to a SubscribeResponse's batch field.
func BatchItemSize(e Entry) int { return 1 + protowire.SizeBytes(EntrySize(e)) }

// AppendBatchItem appends e as one item of a SubscribeResponse's batch field: the
// items of one response, appended one after the other, are the response.
func AppendBatchItem(b []byte, e Entry) []byte {
	b = protowire.AppendTag(b, SubscribeResponseBatch, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(EntrySize(e)))
	return AppendEntry(b, e)
}

// AppendSnapshotComplete appends the SubscribeResponse {snapshot_complete: true}.
func AppendSnapshotComplete(b []byte) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, SubscribeResponseSnapshotComplete, protowire.VarintType), 1)
}

// Delivery is what a subscriber that counts deliveries (sidecar bench) reads of one
// event in a SubscribeResponse. Its slices alias the response's bytes.
type Delivery struct {
	TaskID    []byte
	Payload   []byte
	Version   uint64
	Submitted int64 // unix nanos at the origin; 0 when absent
}

// EachDelivery calls fn for the event of one SubscribeResponse, then for the event
// of each Entry of its batch field, without decoding the messages. Unknown fields are
// skipped, as protobuf does. It returns ErrMalformed for bytes it cannot read, and
// does not check what it does not read (a task_id's UTF-8, an origin_node). fn must
// not keep d.
func EachDelivery(b []byte, fn func(d *Delivery)) error {
	var batch [][]byte
	if err := readDelivery(b, fn, &batch); err != nil {
		return err
	}
	for _, e := range batch {
		if err := readDelivery(e, fn, nil); err != nil {
			return err
		}
	}
	return nil
}

// readDelivery reads one SubscribeResponse (batch != nil: its batch items are
// collected) or one Entry (batch == nil: field 6 is unknown to it) and calls fn when
// it carries an event. The response's event and submitted_at have Entry's numbers.
func readDelivery(b []byte, fn func(*Delivery), batch *[][]byte) error {
	var d Delivery
	var secs, nanos uint64 // submitted_at; a repeated message field merges
	hasEvent, hasTime := false, false
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != SubscribeResponseEvent && num != SubscribeResponseSubmittedAt && (num != SubscribeResponseBatch || batch == nil)) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ErrMalformed
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		var err error
		switch num {
		case SubscribeResponseEvent:
			hasEvent = true
			err = readDeliveredEvent(v, &d)
		case SubscribeResponseSubmittedAt:
			hasTime = true
			if !ReadSecondsNanos(v, &secs, &nanos) {
				err = ErrMalformed
			}
		case SubscribeResponseBatch:
			*batch = append(*batch, v)
		}
		if err != nil {
			return err
		}
	}
	if hasEvent {
		if hasTime {
			d.Submitted = int64(secs)*1e9 + int64(int32(nanos))
		}
		fn(&d)
	}
	return nil
}

// readDeliveredEvent reads the fields of an Event that a Delivery has. A repeated
// message field merges, and a repeated scalar keeps the last value, as in protobuf.
func readDeliveredEvent(b []byte, d *Delivery) error {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		switch {
		case num == EventTaskID && typ == protowire.BytesType:
			d.TaskID, n = protowire.ConsumeBytes(b)
		case num == EventPayload && typ == protowire.BytesType:
			d.Payload, n = protowire.ConsumeBytes(b)
		case num == EventVersion && typ == protowire.VarintType:
			d.Version, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
	}
	return nil
}
