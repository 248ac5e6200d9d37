package antientropy

import (
	"context"
	"errors"
	"fmt"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
)

// Errors of the receiving side; the PeerService maps them to status codes.
var (
	// ErrInvalid: the request breaks the protocol (INVALID_ARGUMENT).
	ErrInvalid = errors.New("antientropy: invalid request")
	// ErrBusy: the receiver serves as many rounds as it allows (RESOURCE_EXHAUSTED).
	ErrBusy = errors.New("antientropy: busy")
	// ErrTreeVersion: the peers hash their tables differently (FAILED_PRECONDITION).
	ErrTreeVersion = errors.New("antientropy: digest tree version differs")
	// ErrTimeout: a call of a round on the peer passed its deadline (CallTimeout, or
	// PullTimeout for a Pull stream as a whole). The peer is frozen, cut off or
	// hanging on purpose: the round with it ends, and waiting for it again at once
	// (a busy peer's ErrBusy is worth a retry) would only hold the caller up.
	ErrTimeout = errors.New("antientropy: the peer did not answer in time")
)

// Peer is the receiving side of a round: a peer's PeerService. Every call returns
// soon after ctx is done: the round's deadlines are its contexts.
type Peer interface {
	Digest(ctx context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error)
	// Pull calls recv with each response of the stream, until the stream ends or
	// recv returns an error (which Pull returns).
	Pull(ctx context.Context, req *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error
	Push(ctx context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error)
}

// Apply validates every entry first and, if all are valid, stores them in the state
// table (each if it wins) and returns how many were stored. An invalid entry fails
// the whole call, naming it.
// from is the node id of the peer the entries came from (a Pull's receiver, a
// Push's caller): an entry of another origin is relayed.
type Apply func(from string, entries []*fanoutv1.SyncEntry) (applied int, err error)

// Config is a Syncer's. NodeID, Table and Apply are required.
type Config struct {
	NodeID string
	// Incarnation is this process's random id, sent in Digest answers so that a
	// caller can tell itself from another process with the same node id. Optional.
	Incarnation uint64
	Table       *state.Table
	Apply       Apply
	// MessageBytes bounds the stamps of one Pull request and the entries of one
	// message (an entry bigger than it travels alone). Default 1 MiB: a tenth of a
	// millisecond of a 10 Gb/s link, and well under every gRPC limit.
	MessageBytes int
	// MaxKeyBytes bounds a task_id or an origin in a request (the node's
	// --max-task-id-bytes). Default 1024.
	MaxKeyBytes int
	// MaxServing bounds the Pull streams served at once; more are refused with
	// ErrBusy (the caller tries again next round). Default 2: a node restarting in a
	// big cluster is pulled by everyone at once, and each stream scans the table.
	MaxServing int

	// The bounds of a round, as the caller (limits.go). A peer that breaks one fails
	// that round alone: the caller's rounds with the other peers do not wait on it.

	// CallTimeout bounds each Digest and each Push call, and the peer's silence in a
	// Pull stream: its first message, and each next one (the caller's own work on a
	// message is not counted). Default 5s: a Digest answer is at most 512 KiB and a
	// Push or a Pull message at most MessageBytes, a fraction of a second on any
	// link; a peer silent for longer is frozen, cut off, or hanging on purpose.
	CallTimeout time.Duration
	// PullTimeout bounds one Pull stream as a whole, against a peer that trickles.
	// Default 1m: PullBytes at 1 MiB/s, a slow link's pace.
	PullTimeout time.Duration
	// PullBytes bounds what one round receives in Pull answers; past it the round
	// stops pulling, pushes what it has been asked for, and ends (Result.PullCut):
	// the next round goes on from there, since the caller's stamps then say what it
	// got. Default 64 MiB: ~250,000 entries of 256 bytes in one round.
	PullBytes int
	// PushEntries and PushBytes bound what one round pushes to one peer. The peer's
	// own rounds pull the rest (their Pull answers are bounded by MessageBytes a
	// message and served MaxServing at a time), so a push is help, not the only way.
	// A peer that asks for more gets this much (Result.PushCut) and is then held
	// (Gate). Defaults 10,000 entries and 4 MiB: a gap a fast path leaves after a
	// short outage, repaired in one round; a peer that wants the whole table of a
	// big node (a new or wiped node, or a lying one) gets a slice of it.
	PushEntries, PushBytes int
	// PushHold is how long a peer that asked for more than a round pushes gets
	// nothing pushed; it doubles with each such round in a row, up to PushHoldMax.
	// Defaults 1m and 16m: a wiped or new node bootstraps by pulling within its
	// --sync-timeout (30s), so after a minute it asks for little; a peer that still
	// asks for everything is lying, and gets a slice every 16 minutes at most.
	PushHold, PushHoldMax time.Duration
	// Now is the clock of Gate; default time.Now.
	Now func() time.Time
}

// Syncer runs rounds against peers and answers theirs.
type Syncer struct {
	cfg     Config
	serving chan struct{} // semaphore of Pull streams served
}

// New returns a Syncer.
func New(cfg Config) (*Syncer, error) {
	if cfg.NodeID == "" || cfg.Table == nil || cfg.Apply == nil {
		return nil, errors.New("antientropy: NodeID, Table and Apply are required")
	}
	if cfg.MessageBytes <= 0 {
		cfg.MessageBytes = 1 << 20
	}
	if cfg.MaxKeyBytes <= 0 {
		cfg.MaxKeyBytes = 1024
	}
	if cfg.MaxServing <= 0 {
		cfg.MaxServing = 2
	}
	cfg.defaultBounds()
	return &Syncer{cfg: cfg, serving: make(chan struct{}, cfg.MaxServing)}, nil
}

// Result is what one round did, from the caller's side.
type Result struct {
	PeerID          string // the receiver's node_id, once it answered
	PeerIncarnation uint64 // the receiver's incarnation (0: not given)
	InSync          bool   // the roots were equal: nothing to repair
	Leaves          int    // leaves that differed
	// Pulled: entries received and stored here. Pushed: entries sent and stored
	// by the receiver.
	Pulled, Pushed int
	// DigestBytes: the Digest requests and responses. Bytes: everything sent and
	// received, digests included (protobuf sizes, without gRPC framing).
	DigestBytes, Bytes int
	Duration           time.Duration
	// PullCut: the round stopped pulling at PullBytes; the next round goes on.
	PullCut bool
	// Wanted: the distinct keys the peer asked for (in the leaves asked about),
	// counted up to PushEntries+1. PushCut: it asked for more than a round pushes
	// (PushEntries, PushBytes); it got the first of them unless PushHeld: the Gate
	// held the round's push back, because the peer asked for too much before.
	Wanted            int
	PushCut, PushHeld bool
	// TimedOut names the call that passed its deadline ("digest", "pull", "push"),
	// with ErrTimeout; "" otherwise.
	TimedOut string
}

// Round compares the table with p's and repairs both, as described in the package
// documentation. It returns what was done up to an error, with the error. g is p's
// push allowance across rounds (nil: none, every round pushes up to the bounds).
func (s *Syncer) Round(ctx context.Context, p Peer, g *Gate) (Result, error) {
	start := time.Now()
	r := Result{}
	rd := &round{s: s, p: p, r: &r, pushOpen: g.open(s.cfg.Now())}
	leaves, err := s.walk(ctx, rd, &r)
	if err == nil && len(leaves) > 0 {
		err = s.repair(ctx, rd, leaves)
	}
	if err == nil {
		g.record(s.cfg.Now(), r.PushCut, s.cfg.PushHold, s.cfg.PushHoldMax)
	}
	r.Duration = time.Since(start)
	return r, err
}

// walk descends the digest trees to the leaves that differ.
func (s *Syncer) walk(ctx context.Context, p *round, r *Result) ([]uint32, error) {
	root := s.cfg.Table.DigestRoot()
	nodes := []uint32{0}
	var mine []uint64
	for level := 0; level < state.DigestLevels; level++ {
		req := &fanoutv1.DigestRequest{NodeId: s.cfg.NodeID, TreeVersion: state.DigestTreeVersion, Level: uint32(level), Nodes: nodes}
		resp, err := p.digest(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("digest level %d: %w", level, err)
		}
		n := proto.Size(req) + proto.Size(resp)
		r.DigestBytes += n
		r.Bytes += n
		r.PeerID, r.PeerIncarnation = resp.GetNodeId(), resp.GetIncarnation()
		if level == 0 && resp.GetRoot() == root {
			r.InSync = true
			return nil, nil
		}
		theirs := resp.GetHashes()
		if len(theirs) != len(nodes)*state.DigestFanout {
			return nil, fmt.Errorf("digest level %d: %d hashes for %d nodes", level, len(theirs), len(nodes))
		}
		mine, _ = s.cfg.Table.DigestChildren(level, nodes, mine[:0])
		var next []uint32
		for i, h := range theirs {
			if h != mine[i] {
				next = append(next, nodes[i/state.DigestFanout]*state.DigestFanout+uint32(i%state.DigestFanout))
			}
		}
		if len(next) == 0 {
			return nil, nil // the difference was repaired meanwhile
		}
		nodes = next
	}
	r.Leaves = len(nodes)
	return nodes, nil
}

// stampSize is what one KeyStamp adds to a PullRequest, near enough.
func stampSize(e *state.Entry) int { return len(e.Key) + len(e.Stamp.Origin) + 20 }

// entrySize is what one SyncEntry adds to a message, near enough.
func entrySize(e *state.Entry) int { return len(e.Raw) + len(e.Stamp.Origin) + 24 }

// repair pulls and pushes the entries of leaves, in groups of at most MessageBytes
// of stamps, until PullBytes have come in.
func (s *Syncer) repair(ctx context.Context, p *round, leaves []uint32) error {
	r := p.r
	for _, group := range s.group(leaves) {
		var set state.LeafSet
		for _, l := range group {
			set.Add(l)
		}
		req := &fanoutv1.PullRequest{NodeId: s.cfg.NodeID, Leaves: group}
		s.cfg.Table.ScanLeaves(&set, func(e *state.Entry) bool {
			req.Have = append(req.Have, &fanoutv1.KeyStamp{TaskId: string(e.Key), Version: e.Stamp.Version, Origin: e.Stamp.Origin, Deleted: e.Deleted})
			return true
		})
		r.Bytes += proto.Size(req)
		var want []string
		err := p.pull(ctx, req, func(resp *fanoutv1.PullResponse) error {
			if len(resp.GetEntries()) > 0 {
				n, err := s.cfg.Apply(r.PeerID, resp.GetEntries())
				r.Pulled += n
				if err != nil {
					return fmt.Errorf("from %s: %w", r.PeerID, err)
				}
			}
			want = p.wanted(&set, resp.GetWant(), want)
			return nil
		})
		if err != nil && !errors.Is(err, errPullCut) {
			return fmt.Errorf("pull: %w", err)
		}
		if err := s.push(ctx, p, want); err != nil {
			return fmt.Errorf("push: %w", err)
		}
		if r.PullCut {
			return nil
		}
	}
	return nil
}

// group splits leaves (ascending) into runs whose stamps fit MessageBytes. It reads
// the table once when they do not all fit one.
func (s *Syncer) group(leaves []uint32) [][]uint32 {
	var set state.LeafSet
	for _, l := range leaves {
		set.Add(l)
	}
	size := make(map[uint32]int, len(leaves))
	total := 0
	s.cfg.Table.ScanLeaves(&set, func(e *state.Entry) bool {
		n := stampSize(e)
		size[state.LeafOf(e.Key)] += n
		total += n
		return true
	})
	if total <= s.cfg.MessageBytes {
		return [][]uint32{leaves}
	}
	var groups [][]uint32
	start, sum := 0, 0
	for i, l := range leaves {
		if i > start && sum+size[l] > s.cfg.MessageBytes {
			groups = append(groups, leaves[start:i])
			start, sum = i, 0
		}
		sum += size[l]
	}
	return append(groups, leaves[start:])
}

// push sends the caller's entries of want to p, at most MessageBytes a request,
// within the round's push bounds; with the Gate closed it sends nothing.
func (s *Syncer) push(ctx context.Context, p *round, want []string) error {
	r := p.r
	if !p.pushOpen {
		r.PushHeld = r.PushHeld || len(want) > 0
		return nil
	}
	req := &fanoutv1.PushRequest{NodeId: s.cfg.NodeID}
	size := 0
	send := func() error {
		if len(req.Entries) == 0 {
			return nil
		}
		r.Bytes += proto.Size(req)
		resp, err := p.push(ctx, req)
		if err != nil {
			return err
		}
		r.Pushed += int(resp.GetApplied())
		req.Entries, size = req.Entries[:0], 0
		return nil
	}
	for _, key := range want {
		e, ok := s.cfg.Table.Get([]byte(key))
		if !ok {
			continue // collected meanwhile
		}
		if !p.budget(entrySize(&e)) {
			r.PushCut = true
			break
		}
		if size > 0 && size+entrySize(&e) > s.cfg.MessageBytes {
			if err := send(); err != nil {
				return err
			}
		}
		req.Entries = append(req.Entries, syncEntry(&e))
		size += entrySize(&e)
	}
	return send()
}

func syncEntry(e *state.Entry) *fanoutv1.SyncEntry {
	return &fanoutv1.SyncEntry{Event: e.Raw, Origin: e.Stamp.Origin, SubmittedAtUnixNanos: e.Submitted}
}
