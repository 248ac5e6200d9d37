package fanout

import (
	"context"
	"errors"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// FuzzReadSubmit and FuzzReadEvent, which hold the readers to protobuf and the rules
// on the decoded messages, are in pkg/event with the reader.

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
		resp, err := n.ReplicateBytes(context.Background(), Caller{}, data)
		if err != nil {
			if inv := (*InvalidError)(nil); !errors.As(err, &inv) { // the edge's INVALID_ARGUMENT
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
			h, ok := n.cfg.Limits.ReadEvent(e.GetEvent())
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
