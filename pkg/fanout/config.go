package fanout

import (
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/persist"
	"github.com/fanout/fanout/pkg/state"
	"github.com/fanout/fanout/pkg/store"
)

// Config configures a Node. It is copied by New; change nothing after.
type Config struct {
	// NodeID names this sidecar in ReplicateRequest.origin_node and in version
	// tie-breaks. Default: the hostname (the pod name on Kubernetes).
	NodeID string
	// TaskTTL is the default ttl of an event that sets none. 0: never expire; an event
	// waits for its peer as long as the bounded buffer keeps it.
	TaskTTL time.Duration
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
	// State bounds the state table (state.DefaultConfig gives the reasons).
	// FirstRevision and Collected are set by the Node.
	State state.Config
	// Limits are the input bounds (package event).
	Limits Limits
	// Logger gets structured logs. Default: JSON on stderr.
	Logger *slog.Logger
	// Now reads the clock. Default time.Now.
	Now func() time.Time
	// After waits: its channel receives once, d from now, as time.After. The node's
	// own waits go through it (the tombstone collector's, and, when set, the ticks of
	// the timing wheel that holds ack deadlines: with Now, a test drives them).
	// Default time.After (the wheel then ticks on a time.Ticker).
	After func(d time.Duration) <-chan time.Time

	// NewTransport, if set, builds the node's transport (transport.go): New calls it
	// once, with the node built and not yet running. The sidecar passes one that
	// builds the mesh (pkg/mesh). nil: the node replicates to no one.
	NewTransport func(n *Node) (Transport, error)
	// OnReplicate, if set, is called with the origin of every Replicate request the
	// node takes (valid and authorized), on the calling RPC's goroutine: it must not
	// block. The mesh notes there the peers that call this node and are not in its
	// peer set (mesh.Mesh.NoteCaller).
	OnReplicate func(origin string)
}

// DefaultConfig returns the defaults; the reason for each is next to its field.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		NodeID: host,
		State:  state.DefaultConfig(),
		Limits: DefaultLimits(),
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
	check(c.NodeID != "", "fanout.Config.NodeID", "must not be empty")
	if c.Store != nil {
		check(c.Limits.EventBytes() <= store.MaxRawBytes, "fanout.Config.Limits.MaxEventBytes",
			"%d is too big with fanout.Config.Store set: an event is stored whole, at most %d bytes", c.Limits.MaxEventBytes, store.MaxRawBytes)
	}
	check(len(c.NodeID) <= MaxNodeIDBytes, "fanout.Config.NodeID", "is %d bytes, at most %d (a DNS name fits)", len(c.NodeID), MaxNodeIDBytes)
	errs = append(errs, c.validateBytes()...)
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
// fits a request on the app listener (the mesh checks its own buffers).
func (c *Config) validateBytes() []error {
	var errs []error
	ev := c.Limits.EventBytes()
	if c.Store == nil && c.Limits.MaxEventBytes > 0 && ev > maxEventBytes {
		errs = append(errs, configerr.New("fanout.Config.Limits.MaxEventBytes",
			"%d is too big: an event encodes to at most %d bytes", c.Limits.MaxEventBytes, maxEventBytes))
	}
	if c.Limits.MaxEventBytes > 0 && ev <= maxEventBytes {
		if need := ev + wire.MessageOverhead(); c.Limits.MaxRequestBytes < need {
			errs = append(errs, configerr.New("fanout.Config.Limits.MaxRequestBytes",
				"must hold one event of fanout.Config.Limits.MaxEventBytes (%d) with its task_id and attributes: at least %d, got %d",
				c.Limits.MaxEventBytes, need, c.Limits.MaxRequestBytes))
		}
	}
	return errs
}

// AppSendBytes is the send limit of the app listener: a Subscribe message of at most
// maxBatchBytes (the largest max_batch_bytes a request may ask for) or a Get page, plus
// one entry (an event at the limits, its origin and its stamps), plus room; a
// SubmitResponse of MaxEvents results is far smaller. Subscribe and Get keep to their
// own bounds; this is the backstop.
func (c *Config) AppSendBytes() int {
	return maxBatchBytes + entryBytes(c.Limits) + wire.MessageOverhead()
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
}
