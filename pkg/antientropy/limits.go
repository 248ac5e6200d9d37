package antientropy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/state"
	"google.golang.org/protobuf/proto"
)

// The bounds of a round (Config, "The bounds of a round"): every call on the peer has
// a deadline, what comes in and what goes out are bounded in entries and bytes, and a
// peer that asks for more than a round pushes is held (Gate).

func (c *Config) defaultBounds() {
	if c.CallTimeout <= 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.PullTimeout <= 0 {
		c.PullTimeout = time.Minute
	}
	if c.PullBytes <= 0 {
		c.PullBytes = 64 << 20
	}
	if c.PushEntries <= 0 {
		c.PushEntries = 10_000
	}
	if c.PushBytes <= 0 {
		c.PushBytes = 4 << 20
	}
	if c.PushHold <= 0 {
		c.PushHold = time.Minute
	}
	if c.PushHoldMax < c.PushHold {
		c.PushHoldMax = max(16*time.Minute, c.PushHold)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

var (
	// errPullCut ends a Pull stream at PullBytes; the round goes on to push.
	errPullCut = errors.New("antientropy: pull bytes bound reached")
	// errStalled and errPullTimeout are the causes of a Pull's end by deadline.
	errStalled     = errors.New("antientropy: pull stream silent")
	errPullTimeout = errors.New("antientropy: pull stream too long")
)

// round is one Round's view of its peer: each call under its deadline, and the
// round's counts against its bounds. Only the goroutine running the round uses it.
type round struct {
	s *Syncer
	p Peer
	r *Result
	// pushOpen: the Gate let this round push (read once, at its start).
	pushOpen bool
	// seen holds the distinct keys the peer asked for; len(seen) <= PushEntries.
	seen map[string]struct{}
	// pulledBytes is what Pull answers brought; the round stops pulling at PullBytes.
	pulledBytes int
	// pushEntries, pushBytes: what this round pushed so far; <= PushEntries,
	// PushBytes (an entry bigger than PushBytes goes alone).
	pushEntries, pushBytes int
}

// timedOut turns err into ErrTimeout if the call's own deadline (cctx), not the
// round's (ctx), ended it.
func (rd *round) timedOut(call string, ctx, cctx context.Context, d time.Duration, err error) error {
	if ctx.Err() != nil || cctx.Err() == nil {
		return err
	}
	rd.r.TimedOut = call
	return fmt.Errorf("%w: %s: no answer within %s (%v)", ErrTimeout, call, d, err)
}

func (rd *round) digest(ctx context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	d := rd.s.cfg.CallTimeout
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := rd.p.Digest(cctx, req)
	if err != nil {
		return nil, rd.timedOut("digest", ctx, cctx, d, err)
	}
	return resp, nil
}

func (rd *round) push(ctx context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	d := rd.s.cfg.CallTimeout
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	resp, err := rd.p.Push(cctx, req)
	if err != nil {
		return nil, rd.timedOut("push", ctx, cctx, d, err)
	}
	return resp, nil
}

// pull runs one Pull stream: it ends with ErrTimeout when the peer is silent for
// CallTimeout (recv's own time is not counted) or the stream lasts PullTimeout, and
// with errPullCut once PullBytes have come in this round (Result.PullCut).
func (rd *round) pull(ctx context.Context, req *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error {
	cfg := &rd.s.cfg
	whole, cancel := context.WithTimeoutCause(ctx, cfg.PullTimeout, errPullTimeout)
	defer cancel()
	sctx, stall := context.WithCancelCause(whole)
	defer stall(nil)
	silence := time.AfterFunc(cfg.CallTimeout, func() { stall(errStalled) })
	defer silence.Stop()
	err := rd.p.Pull(sctx, req, func(resp *fanoutv1.PullResponse) error {
		silence.Stop()
		n := proto.Size(resp)
		rd.r.Bytes += n
		rd.pulledBytes += n
		if err := recv(resp); err != nil {
			return err
		}
		if rd.pulledBytes >= cfg.PullBytes {
			rd.r.PullCut = true
			return errPullCut
		}
		silence.Reset(cfg.CallTimeout)
		return nil
	})
	if err == nil || errors.Is(err, errPullCut) || ctx.Err() != nil {
		return err
	}
	switch cause := context.Cause(sctx); {
	case errors.Is(cause, errStalled):
		rd.r.TimedOut = "pull"
		return fmt.Errorf("%w: pull: the peer sent nothing for %s (%v)", ErrTimeout, cfg.CallTimeout, err)
	case errors.Is(cause, errPullTimeout):
		rd.r.TimedOut = "pull"
		return fmt.Errorf("%w: pull: the stream did not end within %s (%v)", ErrTimeout, cfg.PullTimeout, err)
	}
	return err
}

// wanted appends to want the keys of keys the round will consider pushing: in the
// leaves of set, each once a round, at most PushEntries of them. A peer that asks
// for more sets Result.PushCut.
func (rd *round) wanted(set *state.LeafSet, keys, want []string) []string {
	if rd.seen == nil {
		rd.seen = make(map[string]struct{})
	}
	for _, k := range keys {
		if _, dup := rd.seen[k]; dup || !set.Has(state.LeafOf([]byte(k))) {
			continue // asked twice, or outside what was asked about: ignored
		}
		if len(rd.seen) == rd.s.cfg.PushEntries {
			rd.r.PushCut = true
			rd.r.Wanted = rd.s.cfg.PushEntries + 1
			return want
		}
		rd.seen[k] = struct{}{}
		rd.r.Wanted = len(rd.seen)
		want = append(want, k)
	}
	return want
}

// budget takes an entry of size bytes from the round's push bounds, or reports that
// it does not fit.
func (rd *round) budget(size int) bool {
	cfg := &rd.s.cfg
	if rd.pushEntries >= cfg.PushEntries || (rd.pushEntries > 0 && rd.pushBytes+size > cfg.PushBytes) {
		return false
	}
	rd.pushEntries++
	rd.pushBytes += size
	return true
}

// Gate is one peer's push allowance across rounds (the caller keeps one per peer).
// A round in which the peer asks for more than a round pushes (Result.PushCut)
// closes the gate for PushHold, doubling with each such round in a row up to
// PushHoldMax; a round in which it asks for less takes one doubling back. While the
// gate is closed, rounds with the peer still pull from it, and push nothing
// (Result.PushHeld). The zero Gate is open.
type Gate struct {
	mu sync.Mutex
	// strikes: rounds that asked too much, less one for each that did not. >= 0.
	// Guarded by mu.
	strikes int
	// until: no push before it (zero: open). Guarded by mu.
	until time.Time
}

func (g *Gate) open(now time.Time) bool {
	if g == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return !now.Before(g.until)
}

// record counts a round that ended: cut says whether the peer asked for too much.
func (g *Gate) record(now time.Time, cut bool, hold, maxHold time.Duration) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case cut:
		g.strikes++
		g.until = now.Add(holdFor(g.strikes, hold, maxHold))
	case g.strikes > 0:
		g.strikes--
	}
}

// ClosedUntil is when the gate opens again (zero, or a time past: open).
func (g *Gate) ClosedUntil() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.until
}

// holdFor is how long the gate stays closed after the strikes-th round in a row
// that asked too much: hold, doubled for each strike after the first, up to maxHold.
func holdFor(strikes int, hold, maxHold time.Duration) time.Duration {
	d := hold
	for i := 1; i < strikes && d < maxHold; i++ {
		d *= 2
	}
	return min(d, maxHold)
}
