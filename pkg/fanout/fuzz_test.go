package fanout

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fanout/fanout/internal/frame"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzReadSubmit feeds arbitrary bytes to the app listener's reader (readSubmit,
// internal/wire) and checks it against protobuf: what it accepts, protobuf decodes,
// within every limit, and each event's size as stored (with the version the node
// would assign) is within EventBytes; what it refuses gets an InvalidError naming
// the field, from the decoded request (explainSubmit), never "no rule says why". So
// the reader and the decoder agree on every input.
func FuzzReadSubmit(f *testing.F) {
	seed, _ := proto.Marshal(&fanoutv1.SubmitRequest{RequestId: 3, Ack: fanoutv1.AckPolicy_ACK_POLICY_ALL, AckTimeout: durationpb.New(time.Second),
		Events: []*fanoutv1.Event{{TaskId: "k", Payload: []byte("p"), Attributes: map[string]string{"a": "b"}, Ttl: durationpb.New(1)}, {TaskId: "j", Version: 5}}})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Add([]byte("garbage"))
	// An event with 100 bytes of an unknown field 99.
	f.Add([]byte{0x0a, 0x6a, 0x0a, 0x01, 'k', 0x9a, 0x06, 0x64, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	cfg := testConfig("fuzz")
	cfg.Limits.MaxEventBytes = 64
	cfg.Limits.MaxAttributes = 4
	cfg.Limits.MaxAttributeBytes = 32
	n, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer n.Close()
	l := cfg.Limits
	f.Fuzz(func(t *testing.T, data []byte) {
		c := n.getCall()
		defer n.putCall(c)
		err := n.readSubmit(data, c)
		var inv *InvalidError
		if err != nil {
			if !errors.As(err, &inv) {
				t.Fatalf("refused without naming a field: %v", err)
			}
			return
		}
		if xerr := n.explainSubmit(data); errors.As(xerr, &inv) {
			t.Fatalf("the reader accepts it, the decoder refuses it: %v", xerr)
		}
		var req fanoutv1.SubmitRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			t.Fatalf("the reader accepts what protobuf refuses: %v", err)
		}
		if len(c.req.Events) != len(req.Events) || int32(c.ack) != int32(req.Ack) || c.req.RequestID != req.RequestId {
			t.Fatalf("read %+v, decoded %v", c.req, &req)
		}
		for i, ev := range req.Events {
			if ev.TaskId == "" || len(ev.TaskId) > l.MaxTaskIDBytes || !utf8.ValidString(ev.TaskId) ||
				len(ev.Payload) > l.MaxEventBytes || len(ev.Attributes) > l.MaxAttributes ||
				(ev.Ttl != nil && ev.Ttl.AsDuration() < 0) {
				t.Fatalf("accepted events[%d] outside the limits: %v", i, ev)
			}
			if h := c.heads[i]; string(h.TaskID) != ev.TaskId || h.Version != ev.Version || h.Deleted != ev.Deleted {
				t.Fatalf("events[%d]: read %+v, decoded %v", i, h, ev)
			}
			if size := len(c.req.Events[i]) + wire.EventVersionSize(math.MaxUint64); ev.Version == 0 && size > l.EventBytes() {
				t.Fatalf("accepted events[%d] of %d bytes as stored, EventBytes %d", i, size, l.EventBytes())
			}
		}
	})
}

// FuzzReplicateBytes feeds arbitrary bytes to the peer handler's path (the request is
// read from its bytes, internal/wire): it must answer with a status, or one item status per
// event of the request, never panic.
func FuzzReplicateBytes(f *testing.F) {
	seed, _ := proto.Marshal(&fanoutv1.ReplicateRequest{OriginNode: "x", Events: []*fanoutv1.Event{{TaskId: "k", Version: 1}}, SubmittedAtUnixNanos: []int64{1}})
	f.Add(seed)
	f.Add([]byte("garbage"))
	cfg := testConfig("fuzz")
	cfg.State.MaxKeys = 8 // the BUSY path too
	n, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer n.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := n.replicateFrame(context.Background(), &frame.Frame{B: data})
		if err != nil {
			if s, ok := status.FromError(toStatus(err)); !ok || s.Code() != codes.InvalidArgument {
				t.Fatalf("error %v is not INVALID_ARGUMENT", err)
			}
			return
		}
		var req fanoutv1.ReplicateRequest
		if proto.Unmarshal(data, &req) == nil && len(resp.Statuses) != len(req.Events) {
			t.Fatalf("%d statuses for %d events", len(resp.Statuses), len(req.Events))
		}
	})
}

// FuzzReadEvent: the receive path's reader of an event's bytes (wire.go) agrees with
// decoding the event and validating it (validateEvent, version > 0, and the bytes as
// they arrived within EventBytes) on any bytes that protobuf decodes, refuses what it
// does not, and reads the same task_id and version.
func FuzzReadEvent(f *testing.F) {
	for _, ev := range []*fanoutv1.Event{
		{TaskId: "k", Payload: []byte("p"), Attributes: map[string]string{"a": "b"}, Version: 3, Ttl: durationpb.New(1)},
		{TaskId: "k", Version: 1, Ttl: &durationpb.Duration{Seconds: -1}},
		{TaskId: "kkkk", Payload: make([]byte, 80), Version: 2},
		{TaskId: "gone", Version: 4, Deleted: true},
	} {
		b, _ := proto.Marshal(ev)
		f.Add(b)
	}
	// Valid fields, then an unknown field 99 that takes the event past EventBytes, and
	// a task_id repeated on the wire (protobuf keeps the last) that does too.
	unknown := protowire.AppendBytes(protowire.AppendTag([]byte{0x0a, 0x01, 'k', 0x20, 0x01}, 99, protowire.BytesType), make([]byte, 200))
	f.Add(unknown)
	repeated := []byte{}
	for range 30 {
		repeated = append(repeated, 0x0a, 0x08, 'k', 'k', 'k', 'k', 'k', 'k', 'k', 'k')
	}
	f.Add(append(repeated, 0x20, 0x01))
	l := DefaultLimits()
	l.MaxEventBytes, l.MaxTaskIDBytes, l.MaxAttributes, l.MaxAttributeBytes = 64, 16, 2, 24
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := l.readEvent(b)
		var ev fanoutv1.Event
		if err := proto.Unmarshal(b, &ev); err != nil {
			if ok {
				t.Fatalf("readEvent accepted bytes protobuf refuses (%v)", err)
			}
			return
		}
		want := l.validateEvent(0, &ev) == nil && ev.GetVersion() != 0 && len(b) <= l.EventBytes()
		got := ok && h.Version != 0 // the node answers INVALID for version 0 too
		if ok && string(b[h.TaskOff:h.TaskOff+len(h.TaskID)]) != string(h.TaskID) {
			t.Fatalf("task_id offset %d does not point at %q", h.TaskOff, h.TaskID)
		}
		if got && wire.TaskIDOffset(b) != h.TaskOff {
			t.Fatalf("TaskIDOffset = %d, readEvent read the task_id at %d", wire.TaskIDOffset(b), h.TaskOff)
		}
		if got != want || (got && (string(h.TaskID) != ev.GetTaskId() || h.Version != ev.GetVersion() || h.Deleted != ev.GetDeleted())) {
			t.Fatalf("readEvent = %q v%d %v; decoded %v, valid %v", h.TaskID, h.Version, ok, &ev, want)
		}
	})
}

// FuzzPageToken: any page_token is a revision or an INVALID_ARGUMENT naming the field,
// and every token the node makes reads back as its revision.
func FuzzPageToken(f *testing.F) {
	f.Add("", uint64(0))
	f.Add(pageToken(117655171390570496), uint64(117655171390570496))
	f.Add("not-a-token", uint64(1))
	f.Fuzz(func(t *testing.T, tok string, rev uint64) {
		if got, err := parsePageToken(pageToken(rev)); err != nil || got != rev {
			t.Fatalf("token of %d reads back as %d, %v", rev, got, err)
		}
		if _, err := parsePageToken(tok); err != nil {
			var inv *InvalidError
			if !errors.As(err, &inv) || inv.Field != "page_token" {
				t.Fatalf("error %v does not name page_token", err)
			}
		}
	})
}

// FuzzApplySync decodes arbitrary bytes as a PushRequest, the way the gRPC codec
// would, and applies its entries as anti-entropy does: it never panics, a refused
// request changes nothing, and every entry of an accepted one is in the table as a
// valid event at a version no newer than what the node now holds.
func FuzzApplySync(f *testing.F) {
	ev, _ := proto.Marshal(&fanoutv1.Event{TaskId: "k", Version: 5, Payload: []byte("p")})
	seed, _ := proto.Marshal(&fanoutv1.PushRequest{NodeId: "b", Entries: []*fanoutv1.SyncEntry{{Event: ev, Origin: "b", SubmittedAtUnixNanos: 1}}})
	f.Add(seed)
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req fanoutv1.PushRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		n, err := New(testConfig("a"))
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		before := n.table.Revision()
		applied, err := n.applySync("fuzz", req.GetEntries())
		if err != nil {
			if n.table.Revision() != before || applied != 0 {
				t.Fatalf("refused (%v) but applied %d", err, applied)
			}
			return
		}
		for i, e := range req.GetEntries() {
			h, ok := n.cfg.Limits.readEvent(e.GetEvent())
			if !ok {
				t.Fatalf("accepted entries[%d], which is not an event within the limits", i)
			}
			got, ok := n.table.Get(h.TaskID)
			if !ok && h.Deleted && e.GetSubmittedAtUnixNanos() != 0 &&
				e.GetSubmittedAtUnixNanos() <= time.Now().Add(-n.cfg.State.TombstoneTTL).UnixNano() {
				continue // a deletion older than --tombstone-ttl of a key the table lacks is not stored (state.Table.put)
			}
			if !ok || got.Stamp.Version < h.Version {
				t.Fatalf("entries[%d] accepted, table has %v %+v, want version >= %d", i, ok, got.Stamp, h.Version)
			}
		}
	})
}
