package fanout

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/breaker"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/persist"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
)

// Replicator sends one batch to one peer. *peers.Conn and *peers.FakeConn implement
// it; *peers.Conn is a SyncPeer as well (sync.go). Its errors wrap peers.ErrCongestion, peers.ErrNetwork or peers.ErrPermanent.
type Replicator interface {
	// ReplicateFrame sends a ReplicateRequest of events events, already encoded.
	ReplicateFrame(ctx context.Context, f *frame.Frame, events int) (*fanoutv1.ReplicateResponse, error)
	Close() error
}

// Config configures a Node. It is copied by New; change nothing after.
type Config struct {
	// NodeID names this sidecar in ReplicateRequest.origin_node and in version
	// tie-breaks. Default: the hostname (the pod name on Kubernetes).
	NodeID string
	// Peers are the peer addresses (host:port of their peer listeners) at start.
	// SetPeers changes the set while the node runs (DNS discovery).
	Peers []string
	// Dial opens a Replicator to a peer address. Required when Peers is not empty,
	// and for SetPeers.
	Dial func(addr string) (Replicator, error)
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
	// Batcher configures every per-peer batcher. Now, Logger, OnFinal and Budget are
	// set by the Node.
	Batcher batcher.Config[outEvent]
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
	// Breaker configures every peer's circuit breaker (SPEC §5). Name, IsFailure,
	// IsExcluded and OnStateChange are set by the Node.
	Breaker breaker.Config
	// NewBreaker makes a peer's breaker. Default breaker.New; tests pass fakes.
	NewBreaker func(cfg breaker.Config) (breaker.Breaker, error)
	// ReplicateTimeout is the deadline of one Replicate call. 5s: long enough for a
	// full batch over a slow link; a peer slower than that is treated as congested.
	ReplicateTimeout time.Duration
	// TaskTTL is the default ttl of an event that sets none. 0: never expire; an event
	// waits for its peer as long as the bounded buffer keeps it.
	TaskTTL time.Duration
	// AntiEntropyInterval is how often the node runs an anti-entropy round with one
	// of its peers, in turn (SPEC §14), ±25 %. 30s: a key the fast path missed is
	// repaired within a minute and a half with three peers, and a round in sync
	// costs about 150 bytes. 0 turns the rounds off (bootstrap still runs).
	AntiEntropyInterval time.Duration
	// SyncTimeout bounds how long a starting node waits for its first sync before
	// it reports ready anyway. 30s: a million keys transfer in a few seconds on a
	// LAN; a peer slower than this should not keep a rolling deploy waiting.
	SyncTimeout time.Duration
	// SyncMessageBytes bounds one anti-entropy message (antientropy.Config). 0: 1 MiB.
	SyncMessageBytes int
	// Store, if set, is the durable copy of the state table (--data-dir, pkg/store):
	// New loads it and raises the clock past its high-water mark, every change is
	// committed to it (package persist), and Submit answers once its events are on
	// disk. The caller opens and closes it (after Close). nil: memory only.
	Store persist.Store

	// AuthenticatePeers: the peer listener authenticates its callers (mutual TLS),
	// and a Replicate or Push whose origin_node is not among its Caller's IDs is
	// refused (ErrForbidden; ErrUnauthenticated for a call without a verified
	// certificate): a peer writes only as itself. false: peers are not authenticated
	// (plaintext), and every origin is taken.
	AuthenticatePeers bool
	// ReadyCheck, if set, is asked at every readiness check (Readiness, GetStatus,
	// /readyz, fanout_ready): while it returns an error the node is not ready, with
	// the error as the reason. The bootstrap also waits for it to pass (asked every
	// second): the peers could not be reached before. The sidecar checks its peer
	// certificate with it: every peer refuses an expired one. It must be quick and
	// safe for concurrent use. nil: bootstrap and draining alone decide.
	ReadyCheck func() error
	// State bounds the state table (state.DefaultConfig gives the reasons).
	// FirstRevision and Collected are set by the Node.
	State state.Config
	// Limits are the input bounds of SPEC §10.
	Limits Limits
	// Logger gets structured logs. Default: JSON on stderr.
	Logger *slog.Logger
	// Now reads the clock. Default time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults of SPEC §4, §6 and §10.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		NodeID:              host,
		Batcher:             batcher.DefaultConfig[outEvent](),
		Breaker:             breaker.DefaultConfig(),
		ReplicateTimeout:    5 * time.Second,
		AntiEntropyInterval: 30 * time.Second,
		SyncTimeout:         30 * time.Second,
		PeerRemovalGrace:    30 * time.Second,
		MaxPendingBytes:     256 << 20,
		State:               state.DefaultConfig(),
		Limits:              DefaultLimits(),
	}
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, field, format string, args ...any) {
		if !ok {
			errs = append(errs, configerr.New(field, format, args...))
		}
	}
	check(c.NodeID != "", "fanout.Config.NodeID", "must not be empty")
	if c.Store != nil {
		check(c.Limits.EventBytes() <= store.MaxRawBytes, "fanout.Config.Limits.MaxEventBytes",
			"%d is too big with fanout.Config.Store set: an event is stored whole, at most %d bytes", c.Limits.MaxEventBytes, store.MaxRawBytes)
	}
	check(len(c.NodeID) <= MaxNodeIDBytes, "fanout.Config.NodeID", "is %d bytes, at most %d (a DNS name fits)", len(c.NodeID), MaxNodeIDBytes)
	errs = append(errs, c.validateBytes()...)
	check(len(c.Peers) == 0 || c.Dial != nil, "fanout.Config.Dial", "must be set when there are peers")
	if c.Dial != nil { // peers now or later (SetPeers): their batchers and breakers must be makeable
		errs = append(errs, c.Batcher.Validate(), c.Breaker.Validate())
	}
	check(c.ReplicateTimeout > 0, "fanout.Config.ReplicateTimeout", "must be > 0, got %s", c.ReplicateTimeout)
	check(c.AntiEntropyInterval >= 0, "fanout.Config.AntiEntropyInterval", "must be >= 0 (0: off), got %s", c.AntiEntropyInterval)
	check(c.SyncTimeout >= 0, "fanout.Config.SyncTimeout", "must be >= 0, got %s", c.SyncTimeout)
	check(c.PeerRemovalGrace >= 0, "fanout.Config.PeerRemovalGrace", "must be >= 0 (0: drop at once), got %s", c.PeerRemovalGrace)
	check(c.TaskTTL >= 0, "fanout.Config.TaskTTL", "must be >= 0, got %s", c.TaskTTL)
	check(c.State.MaxKeys > 0, "fanout.Config.State.MaxKeys", "must be > 0, got %d", c.State.MaxKeys)
	check(c.State.MaxBytes > 0, "fanout.Config.State.MaxBytes", "must be > 0, got %d", c.State.MaxBytes)
	check(c.State.TombstoneTTL > 0, "fanout.Config.State.TombstoneTTL", "must be > 0, got %s", c.State.TombstoneTTL)
	check(c.Limits.MaxEventBytes > 0, "fanout.Config.Limits.MaxEventBytes", "must be > 0, got %d", c.Limits.MaxEventBytes)
	check(c.Limits.MaxEvents > 0, "fanout.Config.Limits.MaxEvents", "must be > 0, got %d", c.Limits.MaxEvents)
	check(c.Limits.MaxTaskIDBytes > 0, "fanout.Config.Limits.MaxTaskIDBytes", "must be > 0, got %d", c.Limits.MaxTaskIDBytes)
	return errors.Join(errs...)
}

// maxEventBytes bounds --max-event-bytes, an event encoded, however it is kept: the
// data dir's bound (store.MaxRawBytes), so that what a node accepts it can also keep.
const maxEventBytes = store.MaxRawBytes

// validateBytes checks that the byte bounds fit each other: one event at the limits
// fits a request on the app listener, and a peer's pending buffer.
func (c *Config) validateBytes() []error {
	var errs []error
	ev := c.Limits.EventBytes()
	if c.Store == nil && c.Limits.MaxEventBytes > 0 && ev > maxEventBytes {
		errs = append(errs, configerr.New("fanout.Config.Limits.MaxEventBytes",
			"%d is too big: an event encodes to at most %d bytes", c.Limits.MaxEventBytes, maxEventBytes))
	}
	if c.Limits.MaxEventBytes > 0 && ev <= maxEventBytes {
		if need := ev + messageOverhead; c.Limits.MaxRequestBytes < need {
			errs = append(errs, configerr.New("fanout.Config.Limits.MaxRequestBytes",
				"must hold one event of fanout.Config.Limits.MaxEventBytes (%d) with its task_id and attributes: at least %d, got %d",
				c.Limits.MaxEventBytes, need, c.Limits.MaxRequestBytes))
		}
		if need := c.pendingBudgetBytes(); c.MaxPendingBytes < need {
			errs = append(errs, configerr.New("fanout.Config.MaxPendingBytes",
				"must hold one event of fanout.Config.Limits.MaxEventBytes (%d) with its task_id, attributes and bookkeeping: at least %d, got %d",
				c.Limits.MaxEventBytes, need, c.MaxPendingBytes))
		}
		if need := replicateItemBytes(ev); c.Batcher.MaxBufferBytes < need {
			errs = append(errs, configerr.New("batcher.Config.MaxBufferBytes",
				"must hold one event of fanout.Config.Limits.MaxEventBytes (%d) with its task_id and attributes: at least %d, got %d",
				c.Limits.MaxEventBytes, need, c.Batcher.MaxBufferBytes))
		}
	}
	return errs
}

// PeerMessageBytes is the receive and send limit of the peer listener and of the
// connections to peers (gRPC refuses a bigger message with RESOURCE_EXHAUSTED before
// decoding it): a Replicate request of Batcher.MaxBatchBytes, or an anti-entropy
// message of SyncMessageBytes, plus one event at the limits (a batch or a message
// stops before the event that does not fit, and an event bigger than one travels
// alone), plus messageOverhead: 5,265,201 bytes (5.0 MiB) with the defaults. A peer
// with the same limits takes every batch this node sends; one with smaller limits
// refuses some, and the batcher splits them (batcher.TooLarge).
func (c *Config) PeerMessageBytes() int {
	sync := c.SyncMessageBytes
	if sync <= 0 {
		sync = 1 << 20 // antientropy's default
	}
	return max(c.Batcher.MaxBatchBytes, sync) + replicateItemBytes(c.Limits.EventBytes()) + messageOverhead
}

// AppSendBytes is the send limit of the app listener: a Subscribe message of at most
// maxBatchBytes (the largest max_batch_bytes a request may ask for) or a Get page, plus
// one entry (an event at the limits, its origin and its stamps), plus room; a
// SubmitResponse of MaxEvents results is far smaller. Subscribe and Get keep to their
// own bounds; this is the backstop.
func (c *Config) AppSendBytes() int {
	return maxBatchBytes + entryBytes(c.Limits) + messageOverhead
}

func (c *Config) fillDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewBreaker == nil {
		c.NewBreaker = breaker.New
	}
}
