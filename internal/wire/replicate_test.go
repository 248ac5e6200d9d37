package wire

import (
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// TestAppendReplicate: the request AppendReplicate writes from encoded events is the
// one proto.Marshal writes from the decoded events, field for field.
func TestAppendReplicate(t *testing.T) {
	events := []*fanoutv1.Event{
		{TaskId: "a", Version: 7, Payload: []byte("x")},
		{TaskId: "b/é", Version: 1 << 60, Deleted: true, Attributes: map[string]string{"k": "v"}},
		{TaskId: "c", Version: 3},
	}
	raws := make([][]byte, len(events))
	for i, ev := range events {
		var err error
		if raws[i], err = proto.Marshal(ev); err != nil {
			t.Fatal(err)
		}
	}
	submitted := []int64{1, -1, 1 << 62}
	for _, n := range []int{0, 1, 3} {
		ev := func(i int) []byte { return raws[i] }
		sub := func(i int) int64 { return submitted[i] }
		b := AppendReplicate([]byte("prefix"), "node-a", n, ev, sub)[len("prefix"):]
		var got fanoutv1.ReplicateRequest
		if err := proto.Unmarshal(b, &got); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		want := &fanoutv1.ReplicateRequest{OriginNode: "node-a", Events: events[:n], SubmittedAtUnixNanos: submitted[:n]}
		if n == 0 {
			want.Events, want.SubmittedAtUnixNanos = nil, nil
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("n=%d: decoded %v, want %v", n, &got, want)
		}
		var r Replicate
		if err := ParseReplicate(b, &r); err != nil || len(r.Events) != n {
			t.Fatalf("n=%d: ParseReplicate: %d events, %v", n, len(r.Events), err)
		}
	}
}
