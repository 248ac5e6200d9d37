package antientropy

import (
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
)

// FuzzServe: any bytes a peer sends as a Digest, Pull or Push request get an answer
// or an error, never a panic, and a refused request changes nothing.
func FuzzServe(f *testing.F) {
	for _, m := range []proto.Message{
		&fanoutv1.DigestRequest{NodeId: "b", TreeVersion: 1, Level: 2, Nodes: []uint32{0, 255}},
		&fanoutv1.PullRequest{NodeId: "b", Leaves: []uint32{state.LeafOf([]byte("x"))}, Have: []*fanoutv1.KeyStamp{{TaskId: "x", Version: 3, Origin: "b"}}},
		&fanoutv1.PushRequest{NodeId: "b", Entries: []*fanoutv1.SyncEntry{{Event: []byte("\n\x01y \x05"), Origin: "b"}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	a := newSide(f, "a", 256)
	a.put("x", 2, "a", false)
	f.Fuzz(func(t *testing.T, b []byte) {
		root := a.tab.DigestRoot()
		var d fanoutv1.DigestRequest
		if proto.Unmarshal(b, &d) == nil {
			_, _ = a.s.Digest(&d)
		}
		var p fanoutv1.PullRequest
		if proto.Unmarshal(b, &p) == nil {
			_ = a.s.Pull(&p, func(*fanoutv1.PullResponse) error { return nil })
		}
		var u fanoutv1.PushRequest
		if proto.Unmarshal(b, &u) == nil {
			if _, err := a.s.Push(&u); err != nil && a.tab.DigestRoot() != root {
				t.Fatalf("a refused Push changed the table")
			}
		}
	})
}
