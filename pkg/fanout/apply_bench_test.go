package fanout

import (
	"context"
	"fmt"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
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

// BenchmarkReceiveApplied measures the receiver's path at saturation: a live delivery
// (ReplicateBytes, as the peer listener calls it) of batches of 100 events of 100-byte
// payloads, every event newer than the key's entry, so each is checked, observed, Put
// (Applied: its bytes copied, the digest and the revision log updated) and answered
// OK. The keys cycle over a table of keys entries, filled before the timer starts, as
// a saturated run's receiver holds the keys its origin wrote (bench --keys 0 recurs a
// task_id after 500,000 others). Each round writes the next batch's versions into its
// bytes in place (each a 9-byte varint, as a version of the clock's band is), so the
// loop measures the node, not an encoder.
func BenchmarkReceiveApplied(b *testing.B) {
	const events = 100
	for _, keys := range []int{100_000} {
		b.Run(fmt.Sprintf("events=%d/keys=%d", events, keys), func(b *testing.B) {
			n, err := New(func() Config { c := DefaultConfig(); c.NodeID = "self"; c.Logger = discardLogger(); return c }())
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			batches := receiveBatches(b, keys/events, events)
			version := wallVersion(time.Now()) // 9 bytes as a varint, as are the next billions
			send := func(rb *receiveBatch) {
				for _, off := range rb.versions {
					version++
					protowire.AppendVarint(rb.data[off:off], version)
				}
				resp, err := n.ReplicateBytes(context.Background(), Caller{}, rb.data)
				if err != nil {
					b.Fatal(err)
				}
				for i, st := range resp.Statuses {
					if st != fanoutv1.ItemStatus_ITEM_STATUS_OK {
						b.Fatalf("event %d: %v, want OK", i, st)
					}
				}
			}
			for i := range batches {
				send(&batches[i])
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				send(&batches[i])
				if i++; i == len(batches) {
					i = 0
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

// receiveBatch is one ReplicateRequest's bytes, with where each event's version
// varint starts in them.
type receiveBatch struct {
	data     []byte
	versions []int
}

// receiveBatches encodes count requests of events events each from origin "peer",
// of distinct keys, each version a placeholder of 9 varint bytes.
func receiveBatches(b *testing.B, count, events int) []receiveBatch {
	out := make([]receiveBatch, count)
	for k := range out {
		req := &fanoutv1.ReplicateRequest{OriginNode: "peer"}
		for i := range events {
			e := benchEvent(k*events + i)
			e.Version = 1 << 60
			req.Events = append(req.Events, e)
			req.SubmittedAtUnixNanos = append(req.SubmittedAtUnixNanos, 1700000000e9+int64(i))
		}
		data, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		var r wire.Replicate
		if err := wire.ParseReplicate(data, &r); err != nil || len(r.Events) != events {
			b.Fatal(err, len(r.Events))
		}
		rb := receiveBatch{data: data}
		for _, ev := range r.Events {
			off := versionOffset(b, ev)
			rb.versions = append(rb.versions, cap(data)-cap(ev)+off)
		}
		out[k] = rb
	}
	return out
}

// versionOffset is where the version's varint starts in the event ev.
func versionOffset(b *testing.B, ev []byte) int {
	for pos := 0; pos < len(ev); {
		num, typ, n := protowire.ConsumeTag(ev[pos:])
		if n < 0 {
			b.Fatal("bad tag")
		}
		pos += n
		if num == wire.EventVersion {
			if _, m := protowire.ConsumeVarint(ev[pos:]); m != 9 {
				b.Fatalf("version of %d bytes, want 9", m)
			}
			return pos
		}
		pos += protowire.ConsumeFieldValue(num, typ, ev[pos:])
	}
	b.Fatal("no version")
	return 0
}
