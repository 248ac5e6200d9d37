package loadgen

import (
	"errors"

	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/protobuf/encoding/protowire"
)

// The bench's subscribers read SubscribeResponse messages straight from the wire bytes
// instead of decoding them into Go structs. The client shares the cores with the nodes
// it measures, and a full protobuf decode of every delivery (an Event, its strings and
// payload, a Timestamp, all allocated) was 45 % of its CPU in a saturated run: CPU the
// nodes did not get. A NATS bench client, likewise, does not decode what it counts.
// The stream hands over each message's bytes as a peers.Frame, which the frame codec of
// peers.DialOptions passes through; FuzzEachDelivery checks the reader against the
// protobuf decoder.

// delivered is what the bench needs of one delivery. Its slices alias the frame.
type delivered struct {
	taskID    []byte
	payload   []byte
	version   uint64
	submitted int64 // unix nanos at the origin; 0 when absent
}

var errMalformed = errors.New("malformed SubscribeResponse")

// Field numbers of fanout.v1.SubscribeResponse and Event.
const (
	respEvent       = 1
	respSubmittedAt = 3
	respBatch       = 6 // repeated Entry, whose fields 1 and 3 are the response's
	eventTaskID     = 1
	eventPayload    = 2
	eventVersion    = 4
)

// eachDelivery calls fn for the delivery of one SubscribeResponse, then for each Entry
// of its batch field. Unknown fields are skipped, as protobuf does.
func eachDelivery(b []byte, fn func(*delivered)) error {
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
// it carries an event.
func readDelivery(b []byte, fn func(*delivered), batch *[][]byte) error {
	var d delivered
	var secs, nanos uint64 // submitted_at; a repeated message field merges
	hasEvent, hasTime := false, false
	for len(b) > 0 {
		num, typ, n := peers.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != respEvent && num != respSubmittedAt && (num != respBatch || batch == nil)) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errMalformed
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		var err error
		switch num {
		case respEvent:
			hasEvent = true
			err = readEvent(v, &d)
		case respSubmittedAt:
			hasTime = true
			if !peers.ReadSecondsNanos(v, &secs, &nanos) {
				err = errMalformed
			}
		case respBatch:
			*batch = append(*batch, v)
		}
		if err != nil {
			return err
		}
	}
	if hasEvent {
		if hasTime {
			d.submitted = int64(secs)*1e9 + int64(int32(nanos))
		}
		fn(&d)
	}
	return nil
}

// readEvent reads the fields of an Event that the bench uses. A repeated message field
// merges, and a repeated scalar keeps the last value, as in protobuf.
func readEvent(b []byte, d *delivered) error {
	for len(b) > 0 {
		num, typ, n := peers.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		switch {
		case num == eventTaskID && typ == protowire.BytesType:
			d.taskID, n = protowire.ConsumeBytes(b)
		case num == eventPayload && typ == protowire.BytesType:
			d.payload, n = protowire.ConsumeBytes(b)
		case num == eventVersion && typ == protowire.VarintType:
			d.version, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
	}
	return nil
}
