package mesh

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/breaker"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/peers"
)

// Conn is the mesh's connection to one peer: it sends Replicate batches and takes part
// in anti-entropy (antientropy.Peer: Digest, Pull, Push). *peers.Conn and
// *peers.FakeConn implement it. Its errors wrap peers.ErrCongestion, peers.ErrNetwork
// or peers.ErrPermanent.
type Conn interface {
	// ReplicateFrame sends a ReplicateRequest of events events, already encoded.
	// mayHold: no acknowledgement waits for it, so the peer may answer it later with
	// others; held: it was sent so, and the time to the answer is no round trip.
	ReplicateFrame(ctx context.Context, f *frame.Frame, events int, mayHold bool) (resp *fanoutv1.ReplicateResponse, held bool, err error)
	antientropy.Peer
	Close() error
}

var (
	_ Conn = (*peers.Conn)(nil)
	_ Conn = (*peers.FakeConn)(nil)
)

// Config configures a Mesh. It is copied by New; change nothing after.
type Config struct {
	// Peers are the peer addresses (host:port of their peer listeners) at start.
	// SetPeers changes the set while the mesh runs (DNS discovery).
	Peers []string
	// Dial opens a connection to a peer address. Required when Peers is not empty,
	// and for SetPeers.
	Dial func(addr string) (Conn, error)
	// PeerRemovalGrace is how long a peer that left the set (SetPeers) is still
	// sent what it had pending before the rest is dropped. 30s: one DNS refresh, so
	// an answer that briefly leaves a pod out loses nothing, and well within a pod's
	// termination grace. 0: drop at once.
	PeerRemovalGrace time.Duration
	// OnUnknownPeer, if set, is called (at most once a second, on the calling RPC's
	// goroutine: it must not block) when a peer that is not in the set calls this
	// node: a new node whose address the last DNS refresh did not have yet. The
	// caller refreshes at once, so the new node gets this node's events without
	// waiting for the next refresh.
	OnUnknownPeer func(nodeID string)
	// Batcher configures every per-peer batcher. Now, Logger, OnFinal, Gate, Newer,
	// Size and Budget are set by the Mesh.
	Batcher batcher.Config[wire.Outgoing]
	// ReturnMemory, if set, is called once the links of peers that left the set are
	// closed (once for several that leave together, when the last of them has
	// closed), so that the process can give the memory they held back to the OS: the
	// runtime would keep it until its heap goal shrinks. The sidecar passes
	// debug.FreeOSMemory. It runs on the goroutine that closed the last link.
	ReturnMemory func()
	// MaxPendingBytes bounds the events pending for all peers together (budget.go):
	// each event's bytes once per peer it waits for, plus its bookkeeping (~200
	// bytes). 256 MiB: the sidecar sets a quarter of its memory limit when it has
	// one. At the bound, the peers over their share lose their oldest events.
	MaxPendingBytes int
	// Breaker configures every peer's circuit breaker. Name, IsFailure, IsExcluded
	// and OnStateChange are set by the Mesh.
	Breaker breaker.Config
	// NewBreaker makes a peer's breaker. Default breaker.New; tests pass fakes.
	NewBreaker func(cfg breaker.Config) (breaker.Breaker, error)
	// ReplicateTimeout is the deadline of one Replicate call, and of each call of an
	// anti-entropy round. 5s: long enough for a full batch over a slow link; a peer
	// slower than that is treated as congested.
	ReplicateTimeout time.Duration
	// AntiEntropyInterval is how often the mesh runs an anti-entropy round with one
	// of its peers, in turn, ±25 %. 30s: a key the fast path missed is repaired
	// within a minute and a half with three peers, and a round in sync costs about
	// 150 bytes. 0 turns the rounds off (bootstrap still runs).
	AntiEntropyInterval time.Duration
	// SyncTimeout bounds how long a starting node waits for its first sync before
	// it reports ready anyway. 30s: a million keys transfer in a few seconds on a
	// LAN; a peer slower than this should not keep a rolling deploy waiting.
	SyncTimeout time.Duration
	// SyncMessageBytes bounds one anti-entropy message (antientropy.Config). 0: 1 MiB.
	SyncMessageBytes int
	// ReadyCheck, if set, is asked at every readiness check (Readiness): while it
	// returns an error the mesh is not ready, with the error as the reason. The
	// bootstrap also waits for it to pass (asked every second): the peers could not
	// be reached before. The sidecar checks its peer certificate with it: every peer
	// refuses an expired one. It must be quick and safe for concurrent use.
	ReadyCheck func() error

	// EventBytes is the most bytes one event takes encoded (fanout.Limits.EventBytes);
	// MaxEventBytes the payload bound it comes from (--max-event-bytes, named in
	// errors); MaxTaskIDBytes the longest task_id (anti-entropy's keys). The node's
	// limits: set them from fanout.Config.Limits.
	EventBytes, MaxEventBytes, MaxTaskIDBytes int

	// Logger gets structured logs. Default: JSON on stderr.
	Logger *slog.Logger
	// Now reads the clock. Default time.Now.
	Now func() time.Time
	// After waits: its channel receives once, d from now, as time.After. Every wait
	// of the mesh goes through it (anti-entropy's interval, the removal grace, the
	// bootstrap's retries and timeout, the readiness check's retries). Default
	// time.After.
	After func(d time.Duration) <-chan time.Time
}

// DefaultConfig returns the defaults, each with its reason on Config.
func DefaultConfig() Config {
	return Config{
		Batcher:             batcher.DefaultConfig[wire.Outgoing](),
		Breaker:             breaker.DefaultConfig(),
		ReplicateTimeout:    5 * time.Second,
		AntiEntropyInterval: 30 * time.Second,
		SyncTimeout:         30 * time.Second,
		PeerRemovalGrace:    30 * time.Second,
		MaxPendingBytes:     256 << 20,
	}
}

// Validate checks c as New would: pkg/sidecar checks the whole configuration before
// it prints anything.
func (c Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, configerr.New(field, format, args...))
		}
	}
	check(len(c.Peers) == 0 || c.Dial != nil, "mesh.Config.Dial", "must be set when there are peers")
	if c.Dial != nil { // peers now or later (SetPeers): their batchers and breakers must be makeable
		errs = append(errs, c.Batcher.Validate(), c.Breaker.Validate())
	}
	check(c.ReplicateTimeout > 0, "mesh.Config.ReplicateTimeout", "must be > 0, got %s", c.ReplicateTimeout)
	check(c.AntiEntropyInterval >= 0, "mesh.Config.AntiEntropyInterval", "must be >= 0 (0: off), got %s", c.AntiEntropyInterval)
	check(c.SyncTimeout >= 0, "mesh.Config.SyncTimeout", "must be >= 0, got %s", c.SyncTimeout)
	check(c.PeerRemovalGrace >= 0, "mesh.Config.PeerRemovalGrace", "must be >= 0 (0: drop at once), got %s", c.PeerRemovalGrace)
	check(c.EventBytes > 0, "mesh.Config.EventBytes", "must be > 0 (set it from the node's limits: Limits.EventBytes()), got %d", c.EventBytes)
	check(c.MaxTaskIDBytes > 0, "mesh.Config.MaxTaskIDBytes", "must be > 0 (set it from the node's limits: Limits.MaxTaskIDBytes), got %d", c.MaxTaskIDBytes)
	if c.EventBytes > 0 {
		if need := c.pendingBudgetBytes(); c.MaxPendingBytes < need {
			errs = append(errs, configerr.New("mesh.Config.MaxPendingBytes",
				"must hold one event of fanout.Config.Limits.MaxEventBytes (%d) with its task_id, attributes and bookkeeping: at least %d, got %d",
				c.MaxEventBytes, need, c.MaxPendingBytes))
		}
		if need := wire.ReplicateItemBytes(c.EventBytes); c.Batcher.MaxBufferBytes < need {
			errs = append(errs, configerr.New("batcher.Config.MaxBufferBytes",
				"must hold one event of fanout.Config.Limits.MaxEventBytes (%d) with its task_id and attributes: at least %d, got %d",
				c.MaxEventBytes, need, c.Batcher.MaxBufferBytes))
		}
	}
	return errors.Join(errs...)
}

// PeerMessageBytes is the receive and send limit of the peer listener and of the
// connections to peers (gRPC refuses a bigger message with RESOURCE_EXHAUSTED before
// decoding it): a Replicate request of Batcher.MaxBatchBytes, or an anti-entropy
// message of SyncMessageBytes, plus one event at the limits (a batch or a message
// stops before the event that does not fit, and an event bigger than one travels
// alone), plus wire.MessageOverhead(): 5,265,201 bytes (5.0 MiB) with the defaults. A
// peer with the same limits takes every batch this node sends; one with smaller limits
// refuses some, and the batcher splits them (batcher.TooLarge).
func (c *Config) PeerMessageBytes() int {
	sync := c.SyncMessageBytes
	if sync <= 0 {
		sync = 1 << 20 // antientropy's default
	}
	return max(c.Batcher.MaxBatchBytes, sync) + wire.ReplicateItemBytes(c.EventBytes) + wire.MessageOverhead()
}

func (c *Config) fillDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.After == nil {
		c.After = time.After
	}
	if c.NewBreaker == nil {
		c.NewBreaker = breaker.New
	}
}
