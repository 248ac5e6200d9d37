package wire

import "google.golang.org/protobuf/encoding/protowire"

// Submit is a fanout.v1.SubmitRequest read from its bytes by ParseSubmit. Events are
// the events' bytes as the app encoded them, undecoded.
type Submit struct {
	Events [][]byte // alias the request's bytes
	// Ack is the ack field's varint as read; the AckPolicy protobuf decodes is
	// int32(Ack), as for any enum.
	Ack uint64
	// AckTimeout says whether an ack_timeout field was present; its seconds and nanos
	// are merged over every ack_timeout field, as their varints read (int64 and int32
	// in two's complement).
	AckTimeout                         bool
	AckTimeoutSeconds, AckTimeoutNanos uint64
	RequestID                          uint64
	// Window is window_answers (a bool: any nonzero varint is true).
	Window bool
	// HoldMicros is answer_hold_micros (a uint32: the varint's low 32 bits).
	HoldMicros uint32
}

// ParseSubmit reads a SubmitRequest into s, appending to its Events, with protobuf's
// decoding rules: the last of a repeated scalar wins, repeated ack_timeout fields
// merge, and a known field number with another wire type, like an unknown field, is
// skipped. It returns ErrMalformed for bytes protobuf would refuse, except inside an
// event: an event's own bytes are read by ReadEvent. It does not allocate beyond
// growing s.Events.
func ParseSubmit(b []byte, s *Submit) error {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		switch {
		case num == SubmitRequestEvents && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ErrMalformed
			}
			s.Events, b = append(s.Events, v), b[n:]
		case num == SubmitRequestAckTimeout && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !ReadSecondsNanos(v, &s.AckTimeoutSeconds, &s.AckTimeoutNanos) {
				return ErrMalformed
			}
			s.AckTimeout, b = true, b[n:]
		case (num == SubmitRequestAck || num == SubmitRequestRequestID || num == SubmitRequestWindow || num == SubmitRequestHold) && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return ErrMalformed
			}
			switch num {
			case SubmitRequestAck:
				s.Ack = x
			case SubmitRequestRequestID:
				s.RequestID = x
			case SubmitRequestHold:
				s.HoldMicros = uint32(x)
			default:
				s.Window = x != 0
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

// AppendEventVersion appends a version field to an encoded Event: decoded, the event
// has that version whatever version field it had before (the last one wins).
func AppendEventVersion(b []byte, version uint64) []byte {
	b = protowire.AppendTag(b, EventVersion, protowire.VarintType)
	return protowire.AppendVarint(b, version)
}

// EventVersionSize is what AppendEventVersion adds.
func EventVersionSize(version uint64) int {
	return protowire.SizeTag(EventVersion) + protowire.SizeVarint(version)
}

// EventResult is one fanout.v1.EventResult, to write with AppendSubmitResponse.
type EventResult struct {
	Outcome                  int32 // an EventOutcome
	Revision, CurrentVersion uint64
	CurrentOrigin, Detail    string
}

// PeerAck is one fanout.v1.PeerAck, to write with AppendSubmitResponse.
type PeerAck struct {
	Peer   string
	State  int32 // a PeerAckState
	Detail string
}

// SubmitResponse is a fanout.v1.SubmitResponse to write with AppendSubmitResponse.
type SubmitResponse struct {
	RequestID  uint64
	Versions   []uint64
	PeerAcks   []PeerAck
	Satisfied  bool
	Results    []EventResult
	RequestIDs []uint64
}

// AppendSubmitResponse appends r encoded as protobuf's deterministic Marshal encodes
// the same SubmitResponse: fields in number order, zero values left out
// (TestAppendSubmitResponse compares the bytes).
func AppendSubmitResponse(b []byte, r *SubmitResponse) []byte {
	b = appendUint(b, SubmitResponseRequestID, r.RequestID)
	b = appendPacked(b, SubmitResponseVersions, r.Versions)
	for i := range r.PeerAcks {
		a := &r.PeerAcks[i]
		b = protowire.AppendTag(b, SubmitResponsePeerAcks, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(peerAckSize(a)))
		b = appendString(b, PeerAckPeer, a.Peer)
		b = appendUint(b, PeerAckState, uint64(int64(a.State)))
		b = appendString(b, PeerAckDetail, a.Detail)
	}
	if r.Satisfied {
		b = appendUint(b, SubmitResponseSatisfied, 1)
	}
	for i := range r.Results {
		e := &r.Results[i]
		b = protowire.AppendTag(b, SubmitResponseResults, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(eventResultSize(e)))
		b = appendUint(b, EventResultOutcome, uint64(int64(e.Outcome)))
		b = appendUint(b, EventResultRevision, e.Revision)
		b = appendUint(b, EventResultCurrentVersion, e.CurrentVersion)
		b = appendString(b, EventResultCurrentOrigin, e.CurrentOrigin)
		b = appendString(b, EventResultDetail, e.Detail)
	}
	return appendPacked(b, SubmitResponseRequestIDs, r.RequestIDs)
}

// SubmitResponseSize is the length of AppendSubmitResponse's bytes for r.
func SubmitResponseSize(r *SubmitResponse) int {
	n := uintSize(SubmitResponseRequestID, r.RequestID) + packedSize(SubmitResponseVersions, r.Versions)
	for i := range r.PeerAcks {
		n += protowire.SizeTag(SubmitResponsePeerAcks) + protowire.SizeBytes(peerAckSize(&r.PeerAcks[i]))
	}
	if r.Satisfied {
		n += uintSize(SubmitResponseSatisfied, 1)
	}
	for i := range r.Results {
		n += protowire.SizeTag(SubmitResponseResults) + protowire.SizeBytes(eventResultSize(&r.Results[i]))
	}
	return n + packedSize(SubmitResponseRequestIDs, r.RequestIDs)
}

// packedSize is what appendPacked appends.
func packedSize(field protowire.Number, vs []uint64) int {
	if len(vs) == 0 {
		return 0
	}
	k := 0
	for _, v := range vs {
		k += protowire.SizeVarint(v)
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(k)
}

func peerAckSize(a *PeerAck) int {
	return stringSize(PeerAckPeer, a.Peer) + uintSize(PeerAckState, uint64(int64(a.State))) + stringSize(PeerAckDetail, a.Detail)
}

func eventResultSize(e *EventResult) int {
	return uintSize(EventResultOutcome, uint64(int64(e.Outcome))) + uintSize(EventResultRevision, e.Revision) +
		uintSize(EventResultCurrentVersion, e.CurrentVersion) + stringSize(EventResultCurrentOrigin, e.CurrentOrigin) +
		stringSize(EventResultDetail, e.Detail)
}

// appendUint appends a varint field, or nothing for 0 (proto3's implicit presence).
func appendUint(b []byte, field protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func uintSize(field protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeVarint(v)
}

// appendString appends a string field, or nothing for "".
func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func stringSize(field protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(field) + protowire.SizeBytes(len(s))
}

// AppendSubmitEvent appends to a SubmitRequest being written one event with only a
// task_id and a payload, as deterministic Marshal writes it. With
// AppendSubmitRequestID after the events, the request is byte for byte what Marshal
// writes (TestAppendSubmitRequest). For load generators: a request costs no
// allocation.
func AppendSubmitEvent(b []byte, taskID, payload []byte) []byte {
	n := 0
	if len(taskID) > 0 {
		n += protowire.SizeTag(EventTaskID) + protowire.SizeBytes(len(taskID))
	}
	if len(payload) > 0 {
		n += protowire.SizeTag(EventPayload) + protowire.SizeBytes(len(payload))
	}
	b = protowire.AppendTag(b, SubmitRequestEvents, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if len(taskID) > 0 {
		b = protowire.AppendTag(b, EventTaskID, protowire.BytesType)
		b = protowire.AppendBytes(b, taskID)
	}
	if len(payload) > 0 {
		b = protowire.AppendTag(b, EventPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, payload)
	}
	return b
}

// AppendSubmitRequestID appends a SubmitRequest's request_id (nothing for 0).
func AppendSubmitRequestID(b []byte, id uint64) []byte {
	return appendUint(b, SubmitRequestRequestID, id)
}

// Answer is what a load generator reads of a fanout.v1.SubmitResponse with
// ParseSubmitResponse.
type Answer struct {
	RequestID uint64
	Versions  []uint64 // appended to
	// Outcomes has each result's outcome, an EventOutcome; appended to.
	Outcomes []int32
	// RequestIDs are the requests an answer of several covers (window_answers);
	// appended to.
	RequestIDs []uint64
}

// ParseSubmitResponse reads a SubmitResponse into a, appending to its Versions, with
// protobuf's decoding rules for what it reads: versions packed or not, the last of an
// outcome or a request_id wins, a field of another wire type is skipped. It returns
// ErrMalformed for broken framing; it does not look into peer_acks or check the UTF-8
// of strings, which protobuf would, because a load generator reads what a sidecar
// wrote. So it accepts everything protobuf accepts, and reads the same
// (FuzzParseSubmitResponse).
func ParseSubmitResponse(b []byte, a *Answer) error {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return ErrMalformed
		}
		b = b[n:]
		switch {
		case num == SubmitResponseRequestID && typ == protowire.VarintType:
			a.RequestID, n = protowire.ConsumeVarint(b)
		case num == SubmitResponseVersions:
			a.Versions, n = appendVarints(a.Versions, num, typ, b)
		case num == SubmitResponseRequestIDs:
			a.RequestIDs, n = appendVarints(a.RequestIDs, num, typ, b)
		case num == SubmitResponseResults && typ == protowire.BytesType:
			var r []byte
			if r, n = protowire.ConsumeBytes(b); n >= 0 {
				outcome, ok := readOutcome(r)
				if !ok {
					return ErrMalformed
				}
				a.Outcomes = append(a.Outcomes, outcome)
			}
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

// readOutcome reads an EventResult's outcome, as the int32 protobuf decodes. It
// reports false for broken framing.
func readOutcome(b []byte) (int32, bool) {
	var outcome int32
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == EventResultOutcome && typ == protowire.VarintType {
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			outcome = int32(v)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return 0, false
		}
		b = b[n:]
	}
	return outcome, true
}

// appendPacked appends a packed repeated uint64 field (nothing for none).
func appendPacked(b []byte, field protowire.Number, vs []uint64) []byte {
	if len(vs) == 0 {
		return b
	}
	n := 0
	for _, v := range vs {
		n += protowire.SizeVarint(v)
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	for _, v := range vs {
		b = protowire.AppendVarint(b, v)
	}
	return b
}
