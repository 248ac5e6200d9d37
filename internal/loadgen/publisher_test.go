package loadgen

import (
	"testing"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// TestPublisherRequest: the bytes a publisher writes are the SubmitRequest it means,
// request after request in the same reused buffers: its id, the batch's task_ids in
// sequence, and the stamp in every payload.
func TestPublisherRequest(t *testing.T) {
	for _, keys := range []int{0, 7} {
		cfg := &Config{Batch: 3, Payload: 40, Prefix: "bench/x/", Keys: keys, Publishers: 2, Pipeline: 1}
		p := newPublisher(1, cfg, nil, clock{}, window{}, nil, nil)
		for _, seq := range []int64{0, 3, 1_000_000} {
			stamp := loadkit.Stamp{Sent: time.Duration(seq) + 5, Due: time.Duration(seq)}
			p.request(uint64(seq)+1, seq, stamp)
			var req fanoutv1.SubmitRequest
			if err := proto.Unmarshal(p.req.B, &req); err != nil {
				t.Fatal(err)
			}
			if req.RequestId != uint64(seq)+1 || len(req.Events) != cfg.Batch {
				t.Fatalf("keys %d, seq %d: request_id %d, %d events", keys, seq, req.RequestId, len(req.Events))
			}
			for i, ev := range req.Events {
				if want := taskID(cfg.Prefix, keys, seq+int64(i), 1, 2); ev.TaskId != want {
					t.Errorf("keys %d, seq %d: events[%d].task_id %q, want %q", keys, seq, i, ev.TaskId, want)
				}
				got, ok := loadkit.ReadStamp(ev.Payload)
				if !ok || got != stamp || len(ev.Payload) != cfg.Payload {
					t.Errorf("keys %d, seq %d: events[%d]: %d payload bytes, stamp %+v (%v), want %+v", keys, seq, i, len(ev.Payload), got, ok, stamp)
				}
			}
		}
	}
}
