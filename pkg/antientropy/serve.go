package antientropy

import (
	"fmt"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// maxDigestNodes is the widest level a Digest request may ask about (level 3).
const maxDigestNodes = 4096

// Digest answers a peer's Digest request.
func (s *Syncer) Digest(req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	if v := req.GetTreeVersion(); v != state.DigestTreeVersion {
		return nil, fmt.Errorf("%w: tree_version %d, this node's is %d; upgrade the older node", ErrTreeVersion, v, state.DigestTreeVersion)
	}
	if err := s.checkNodeID(req.GetNodeId()); err != nil {
		return nil, err
	}
	if n := len(req.GetNodes()); n == 0 || n > maxDigestNodes {
		return nil, invalid("nodes: %d nodes, want 1..%d", n, maxDigestNodes)
	}
	resp := &fanoutv1.DigestResponse{NodeId: s.cfg.NodeID, Incarnation: s.cfg.Incarnation, Root: s.cfg.Table.DigestRoot()}
	hashes, ok := s.cfg.Table.DigestChildren(int(req.GetLevel()), req.GetNodes(), make([]uint64, 0, len(req.GetNodes())*state.DigestFanout))
	if !ok {
		return nil, invalid("level %d, nodes: a node out of range (level l has 16^l nodes, l < %d)", req.GetLevel(), state.DigestLevels)
	}
	resp.Hashes = hashes
	return resp, nil
}

func (s *Syncer) checkNodeID(id string) error {
	if id == "" || len(id) > s.cfg.MaxKeyBytes {
		return invalid("node_id: %d bytes, want 1..%d", len(id), s.cfg.MaxKeyBytes)
	}
	return nil
}

// Pull answers a peer's Pull request: send is called with each message of the
// stream. It returns ErrBusy when MaxServing streams are being served.
func (s *Syncer) Pull(req *fanoutv1.PullRequest, send func(*fanoutv1.PullResponse) error) error {
	select {
	case s.serving <- struct{}{}:
		defer func() { <-s.serving }()
	default:
		return fmt.Errorf("%w: %d anti-entropy streams served already; try next round", ErrBusy, s.cfg.MaxServing)
	}
	set, have, err := s.readPull(req)
	if err != nil {
		return err
	}
	out := &fanoutv1.PullResponse{}
	size := 0
	flush := func() error {
		if len(out.Entries) == 0 && len(out.Want) == 0 {
			return nil
		}
		err := send(out)
		out, size = &fanoutv1.PullResponse{}, 0 // send may keep out: start a new one
		return err
	}
	var want []string
	s.cfg.Table.ScanLeaves(set, func(e *state.Entry) bool {
		h, ok := have[string(e.Key)]
		delete(have, string(e.Key))
		switch {
		case ok && h.Newer(e.Stamp):
			want = append(want, string(e.Key))
			return true
		case ok && !e.Stamp.Newer(h):
			return true // the same
		}
		if size > 0 && size+entrySize(e) > s.cfg.MessageBytes {
			if err = flush(); err != nil {
				return false
			}
		}
		out.Entries = append(out.Entries, syncEntry(e))
		size += entrySize(e)
		return true
	})
	if err != nil {
		return err
	}
	for key := range have { // the caller holds them, this node does not
		want = append(want, key)
	}
	for _, key := range want {
		if size > 0 && size+len(key)+4 > s.cfg.MessageBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		out.Want = append(out.Want, key)
		size += len(key) + 4
	}
	return flush()
}

// readPull validates a Pull request as a whole and returns its leaves and stamps.
func (s *Syncer) readPull(req *fanoutv1.PullRequest) (*state.LeafSet, map[string]state.Stamp, error) {
	if err := s.checkNodeID(req.GetNodeId()); err != nil {
		return nil, nil, err
	}
	leaves := req.GetLeaves()
	if len(leaves) == 0 {
		return nil, nil, invalid("leaves: empty")
	}
	set := new(state.LeafSet)
	for i, l := range leaves {
		if l >= state.DigestLeaves || (i > 0 && l <= leaves[i-1]) {
			return nil, nil, invalid("leaves[%d]: %d; leaves must ascend, below %d", i, l, state.DigestLeaves)
		}
		set.Add(l)
	}
	have := make(map[string]state.Stamp, len(req.GetHave()))
	for i, h := range req.GetHave() {
		switch k, o := h.GetTaskId(), h.GetOrigin(); {
		case k == "" || len(k) > s.cfg.MaxKeyBytes:
			return nil, nil, invalid("have[%d].task_id: %d bytes, want 1..%d", i, len(k), s.cfg.MaxKeyBytes)
		case o == "" || len(o) > s.cfg.MaxKeyBytes:
			return nil, nil, invalid("have[%d].origin: %d bytes, want 1..%d", i, len(o), s.cfg.MaxKeyBytes)
		case !set.Has(state.LeafOf([]byte(k))):
			return nil, nil, invalid("have[%d].task_id: %q is in none of the leaves", i, k)
		}
		if _, dup := have[h.GetTaskId()]; dup {
			return nil, nil, invalid("have[%d].task_id: %q twice", i, h.GetTaskId())
		}
		have[h.GetTaskId()] = state.Stamp{Version: h.GetVersion(), Origin: h.GetOrigin()}
	}
	return set, have, nil
}

// Push answers a peer's Push request.
func (s *Syncer) Push(req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	if err := s.checkNodeID(req.GetNodeId()); err != nil {
		return nil, err
	}
	n, err := s.cfg.Apply(req.GetNodeId(), req.GetEntries())
	if err != nil {
		return nil, err
	}
	return &fanoutv1.PushResponse{NodeId: s.cfg.NodeID, Applied: uint32(n)}, nil
}
