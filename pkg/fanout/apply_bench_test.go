package fanout

import (
	"context"
	"fmt"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// BenchmarkReceive measures the apply path (apply.go) on a node of its own: a live
// delivery of 100 events (ReplicateBytes, as the peer listener calls it) and a repair
// of 100 entries (Apply), by the origin of the events. After the first round the table
// holds every event, so each is checked, observed and answered STALE: the per-event
// cost of the path, without the table's growth.
func BenchmarkReceive(b *testing.B) {
	const events = 100
	for _, origin := range []string{"peer", "self"} {
		n, err := New(func() Config { c := DefaultConfig(); c.NodeID = "self"; c.Logger = discardLogger(); return c }())
		if err != nil {
			b.Fatal(err)
		}
		req := &fanoutv1.ReplicateRequest{OriginNode: origin}
		entries := make([]*fanoutv1.SyncEntry, events)
		for i := range events {
			e := benchEvent(i)
			req.Events = append(req.Events, e)
			req.SubmittedAtUnixNanos = append(req.SubmittedAtUnixNanos, 1700000000e9+int64(i))
			raw, err := proto.Marshal(e)
			if err != nil {
				b.Fatal(err)
			}
			entries[i] = &fanoutv1.SyncEntry{Event: raw, Origin: origin, SubmittedAtUnixNanos: 1700000000e9 + int64(i)}
		}
		data, err := proto.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		if origin == "self" { // this node's writes, restored: a Replicate of them is an echo
			if _, err := n.Apply("peer", entries); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("path=replicate/origin=%s/events=%d", origin, events), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := n.ReplicateBytes(context.Background(), Caller{}, data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("path=apply/origin=%s/events=%d", origin, events), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := n.Apply("peer", entries); err != nil {
					b.Fatal(err)
				}
			}
		})
		n.Close()
	}
}
