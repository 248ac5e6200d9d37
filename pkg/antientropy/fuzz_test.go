package antientropy

import (
	"context"
	"fmt"
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

// anyPeer answers a round with what a fuzzer wrote: a Digest whose hashes differ
// from the caller's where mask says, a Pull answer decoded from pull (any entries,
// any wants), and a Push answer that claims applied. It counts what it is pushed.
type anyPeer struct {
	caller  *side
	mask    uint64
	pull    []byte
	applied uint32
	pushed  int
}

func (p *anyPeer) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	hashes, _ := p.caller.tab.DigestChildren(int(req.GetLevel()), req.GetNodes(), nil)
	for i := range hashes {
		if p.mask>>(uint(i)%64)&1 == 1 {
			hashes[i] ^= 1
		}
	}
	return &fanoutv1.DigestResponse{NodeId: "any", Root: p.mask, Hashes: hashes}, nil
}

func (p *anyPeer) Pull(_ context.Context, _ *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error {
	var resp fanoutv1.PullResponse
	if err := proto.Unmarshal(p.pull, &resp); err != nil {
		return err
	}
	return recv(&resp)
}

func (p *anyPeer) Push(_ context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	p.pushed += len(req.GetEntries())
	return &fanoutv1.PushResponse{NodeId: "any", Applied: p.applied}, nil
}

// FuzzRoundAgainstAnyPeer: whatever a peer answers, a round ends without a panic and
// pushes it at most PushEntries entries.
func FuzzRoundAgainstAnyPeer(f *testing.F) {
	want, _ := proto.Marshal(&fanoutv1.PullResponse{Want: []string{"k1", "k2", "k2", "nope"}})
	f.Add(uint64(0xffff), want, uint32(2))
	f.Add(uint64(1), []byte{0x12, 0x02, 'k', '1'}, uint32(1<<31))
	a := newSide(f, "a", 256)
	a.s.cfg.PushEntries = 3
	for i := range 8 {
		a.put(fmt.Sprintf("k%d", i), 1, "a", false)
	}
	f.Fuzz(func(t *testing.T, mask uint64, pull []byte, applied uint32) {
		p := &anyPeer{caller: a, mask: mask, pull: pull, applied: applied}
		_, _ = a.s.Round(context.Background(), p, nil)
		if p.pushed > a.s.cfg.PushEntries {
			t.Fatalf("pushed %d entries, bound %d", p.pushed, a.s.cfg.PushEntries)
		}
	})
}
