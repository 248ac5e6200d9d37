package loadkit

import (
	"encoding/binary"
	"time"
)

// SentBytes and StampBytes are the payload sizes that carry the send time, and the
// send time and the due time.
const (
	SentBytes  = 8
	StampBytes = 16
)

// Stamp is what a publisher writes into the first bytes of every payload: offsets
// from the run's epoch, which the subscribers of the same process read with the same
// clock.
//
// Sent is the actual send time: the clock read right before the send (one read per
// send; every event of a batch carries the same). Due is when the send was due on the
// schedule (= Sent for an unpaced send). Sent <= Due never happens by more than a
// clock read: the pacer does not send early.
type Stamp struct {
	Sent, Due time.Duration
}

// Put writes s big endian into payload: Sent into bytes [0, 8), Due into [8, 16). A
// payload of 8 to 15 bytes gets Sent only; a shorter one nothing.
func (s Stamp) Put(payload []byte) {
	if len(payload) >= SentBytes {
		binary.BigEndian.PutUint64(payload, uint64(s.Sent))
	}
	if len(payload) >= StampBytes {
		binary.BigEndian.PutUint64(payload[SentBytes:], uint64(s.Due))
	}
}

// ReadStamp reads what Put wrote. ok is false for a payload shorter than 8 bytes; a
// payload of 8 to 15 bytes has Due = Sent.
func ReadStamp(payload []byte) (s Stamp, ok bool) {
	if len(payload) < SentBytes {
		return Stamp{}, false
	}
	s.Sent = time.Duration(binary.BigEndian.Uint64(payload))
	s.Due = s.Sent
	if len(payload) >= StampBytes {
		s.Due = time.Duration(binary.BigEndian.Uint64(payload[SentBytes:]))
	}
	return s, true
}

// Latency returns the two latencies of an event that arrived at offset arrival:
// fromSent, from its actual send (the latency both benches report first), and
// fromDue, from the time it was due on the schedule (which adds the publisher's lag:
// timer rounding, and any backlog when the publisher could not keep to the schedule).
func (s Stamp) Latency(arrival time.Duration) (fromSent, fromDue time.Duration) {
	return arrival - s.Sent, arrival - s.Due
}

// Measured reports whether the event belongs to the measured window, which starts at
// measureFrom: it does when it was due there or later, however late it went out.
func (s Stamp) Measured(measureFrom time.Duration) bool { return s.Due >= measureFrom }
