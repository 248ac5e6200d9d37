package event

import (
	"fmt"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The rules, written on the decoded message: the oracle the fuzz targets and the
// table tests hold the reader to. They say what a valid request is in terms of the
// generated types (proto.Unmarshal, durationpb's CheckValid and AsDuration, the
// decoded attributes map), independently of internal/wire, and in which order the
// reader names the first broken rule. Only the reader runs in the node.

// decodedFault is the error the reader must give for the SubmitRequest in b, by the
// rules on the decoded request; nil if it is valid. For bytes protobuf refuses it
// names the field ("request", or the first "events[i]" protobuf refuses) with
// protobuf's reason, which the reader words its own way.
func (l Limits) decodedFault(b []byte) *InvalidError {
	var req fanoutv1.SubmitRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		raws, rest, ok := splitEvents(b)
		// The request's own fields first (an ack_timeout that is not a Duration), then
		// its events in order.
		if ok && proto.Unmarshal(rest, new(fanoutv1.SubmitRequest)) == nil {
			for i, raw := range raws {
				if err := proto.Unmarshal(raw, new(fanoutv1.Event)); err != nil {
					return Invalid(fmt.Sprintf("events[%d]", i), "not a valid fanout.v1.Event: %v", err)
				}
			}
		}
		return Invalid("request", "not a valid fanout.v1.SubmitRequest: %v", err)
	}
	if err := l.validateSubmit(&req); err != nil {
		return err
	}
	raws, _, _ := splitEvents(b)
	bytes := l.EventBytes()
	for i, raw := range raws {
		if size := StoredSize(len(raw), req.Events[i].GetVersion()); size > bytes {
			return Invalid(fmt.Sprintf("events[%d]", i), "%d bytes as sent, with the version the sidecar adds; at most %d "+
				"(a payload of --max-event-bytes %d, and room for task_id, attributes, version and ttl); fields "+
				"this sidecar does not know, and fields sent twice, count too: send a smaller event, or only "+
				"the fields of fanout.v1.Event, once each", size, bytes, l.MaxEventBytes)
		}
	}
	return nil
}

// splitEvents returns the bytes of each events field of a SubmitRequest, and the
// request's other fields, read with protowire alone; ok is false for broken framing.
func splitEvents(b []byte) (events [][]byte, rest []byte, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return events, rest, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return events, rest, false
		}
		if num == 1 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			events = append(events, v)
		} else {
			rest = append(rest, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return events, rest, true
}

// known is d without the unknown fields it was sent with: CheckValid's message shows
// them, and the reader, which reads only seconds and nanos, does not.
func known(d *durationpb.Duration) *durationpb.Duration {
	if d == nil {
		return nil
	}
	return &durationpb.Duration{Seconds: d.Seconds, Nanos: d.Nanos}
}

// validateSubmit checks a decoded SubmitRequest's fields against their bounds.
func (l Limits) validateSubmit(req *fanoutv1.SubmitRequest) *InvalidError {
	if n := len(req.GetEvents()); n > l.MaxEvents {
		return Invalid("events", "%d events, at most %d per request; split the batch", n, l.MaxEvents)
	}
	if _, ok := fanoutv1.AckPolicy_name[int32(req.GetAck())]; !ok {
		return Invalid("ack", "unknown policy %d", req.GetAck())
	}
	if t := known(req.GetAckTimeout()); t != nil {
		if err := t.CheckValid(); err != nil {
			return Invalid("ack_timeout", "%v", err)
		}
		if t.AsDuration() < 0 {
			return Invalid("ack_timeout", "negative (%s); use 0 for the default", t.AsDuration())
		}
	}
	for i, ev := range req.GetEvents() {
		if err := l.validateEvent(i, ev); err != nil {
			return err
		}
	}
	return nil
}

// validateEvent checks one decoded event; i is its index for the error message.
func (l Limits) validateEvent(i int, ev *fanoutv1.Event) *InvalidError {
	field := func(name string) string { return fmt.Sprintf("events[%d].%s", i, name) }
	if ev == nil {
		return Invalid(fmt.Sprintf("events[%d]", i), "null event")
	}
	id := ev.GetTaskId()
	switch {
	case id == "":
		return Invalid(field("task_id"), "empty")
	case len(id) > l.MaxTaskIDBytes:
		return Invalid(field("task_id"), "%d bytes, at most %d", len(id), l.MaxTaskIDBytes)
	case !utf8.ValidString(id):
		return Invalid(field("task_id"), "not valid UTF-8")
	}
	if n := len(ev.GetPayload()); n > l.MaxEventBytes {
		return Invalid(field("payload"), "%d bytes, at most %d (--max-event-bytes)", n, l.MaxEventBytes)
	}
	attrs := ev.GetAttributes()
	if n := len(attrs); n > l.MaxAttributes {
		return Invalid(field("attributes"), "%d entries, at most %d", n, l.MaxAttributes)
	}
	total := 0
	for k, v := range attrs {
		total += len(k) + len(v)
	}
	if total > l.MaxAttributeBytes {
		return Invalid(field("attributes"), "%d bytes of keys and values, at most %d", total, l.MaxAttributeBytes)
	}
	if t := known(ev.GetTtl()); t != nil {
		if err := t.CheckValid(); err != nil {
			return Invalid(field("ttl"), "%v", err)
		}
		if t.AsDuration() < 0 {
			return Invalid(field("ttl"), "negative (%s); use 0 for the node default", t.AsDuration())
		}
	}
	return nil
}
