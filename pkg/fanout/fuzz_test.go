package fanout

import (
	"context"
	"testing"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzValidateSubmit decodes arbitrary bytes as a SubmitRequest, the way the gRPC codec
// would, and checks that validation never panics and that what it accepts is within
// every limit.
func FuzzValidateSubmit(f *testing.F) {
	seed, _ := proto.Marshal(&fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{
		{TaskId: "k", Payload: []byte("p"), Attributes: map[string]string{"a": "b"}, Ttl: durationpb.New(1)},
	}})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	l := DefaultLimits()
	l.MaxEventBytes = 64
	f.Fuzz(func(t *testing.T, data []byte) {
		var req fanoutv1.SubmitRequest
		if proto.Unmarshal(data, &req) != nil {
			return // the gRPC codec refuses these before any handler runs
		}
		if l.validateSubmit(&req) != nil {
			return
		}
		for i, ev := range req.Events {
			if ev.TaskId == "" || len(ev.TaskId) > l.MaxTaskIDBytes || !utf8.ValidString(ev.TaskId) ||
				len(ev.Payload) > l.MaxEventBytes || len(ev.Attributes) > l.MaxAttributes ||
				(ev.Ttl != nil && ev.Ttl.AsDuration() < 0) {
				t.Fatalf("accepted events[%d] outside the limits: %v", i, ev)
			}
		}
	})
}

// FuzzReplicateBytes feeds arbitrary bytes to the peer handler: it must answer with a
// status or one item status per event, never panic.
func FuzzReplicateBytes(f *testing.F) {
	seed, _ := proto.Marshal(&fanoutv1.ReplicateRequest{OriginNode: "x", Events: []*fanoutv1.Event{{TaskId: "k", Version: 1}}, SubmittedAtUnixNanos: []int64{1}})
	f.Add(seed)
	f.Add([]byte("garbage"))
	cfg := testConfig("fuzz")
	cfg.InboxCapacity = 8
	n, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer n.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		var req fanoutv1.ReplicateRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		resp, err := n.Replicate(context.Background(), &req)
		if err != nil {
			if toStatus(err) == nil {
				t.Fatal("error without a status")
			}
			return
		}
		if len(resp.Statuses) != len(req.Events) {
			t.Fatalf("%d statuses for %d events", len(resp.Statuses), len(req.Events))
		}
	})
}
