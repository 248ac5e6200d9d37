package jetstream

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
	"github.com/fanout/fanout/pkg/event"
)

// Config configures the transport. New copies it; the caller must not change it
// afterwards.
type Config struct {
	// Bucket names the KV bucket: the stream KV_<Bucket>, subjects $KV.<Bucket>.>.
	// 1..64 bytes of [A-Za-z0-9_-] (the KV format's rule; 64 keeps the longest API
	// subject on one protocol line). Default "fanout".
	Bucket string
	// Replicas is the stream's replica count when this transport creates it: 3
	// survives one server's loss with a Raft majority, so a publish ack (ONE, QUORUM)
	// outlives it. An existing stream keeps its own (reported, not changed). 1..5.
	Replicas int
	// MaxAttempts bounds the publishes of one event that meet a wrong last sequence
	// in a row before its publisher backs off and starts again: 8. A conflict means
	// another writer's event landed, or the read came from a replica behind the
	// leader (a direct get may be served by any replica); past 8 in a row the key is
	// hot or the replica cut off, and a pause serves better than a spin.
	MaxAttempts int
	// OutboxBytes bounds the events of QUEUED Submits not yet in the stream, in their
	// bytes: 64 MiB, the mesh's pending budget per peer. Past it a QUEUED Submit's
	// events are dropped (FateOverflow), counted.
	OutboxBytes int64
	// Publishers is how many events are put into the stream at once: 64. A put is
	// one or two round trips to the stream's leader (a read of the key, unless the
	// feed's hint or a new key spares it; the publish and its Raft commit), each a
	// request that waits: with 64 in flight a sidecar is held by its CPU or the
	// servers' rather than by its round trips.
	Publishers int
	// TombstoneTTL is how long a delete marker stays in the stream: the node's
	// --tombstone-ttl (a tombstone kept as long on every node), at least 1 s (the
	// server's shortest message TTL). Default 24h.
	TombstoneTTL time.Duration
	// FeedCheck is how often the feed checks that its consumer still delivers while
	// the stream holds more (feed.watch): 5 s, so that a stalled consumer is replaced
	// within 10-15 s, at the cost of one request to the stream's leader per idle
	// check.
	FeedCheck time.Duration
	// Checkpoint, if set, keeps the transport's position across restarts (the
	// sidecar's --data-dir store): the feed resumes from the last sequence it
	// applied, and the events of this node not yet in the stream are published
	// again. nil: the feed starts from the stream's snapshot, and the outbox is lost
	// with the process.
	Checkpoint Checkpoint
	// Limits are the node's event limits (fanout.Config.Limits): what an event may
	// be, to check its subject and its size against the server's. Default
	// event.DefaultLimits().
	Limits event.Limits
	// Now is the clock (publish latency, expiry). Default time.Now.
	Now func() time.Time
	// Logger is where the transport logs. Default slog.Default().
	Logger *slog.Logger

	// noMsgTTL: purge delete markers from the sidecars even where the server has
	// per-message TTLs (tests of the purger).
	noMsgTTL bool
}

// DefaultConfig returns the defaults, each with its reason on the field.
func DefaultConfig() Config {
	return Config{
		Bucket:       "fanout",
		Replicas:     3,
		MaxAttempts:  8,
		OutboxBytes:  64 << 20,
		Publishers:   64,
		TombstoneTTL: 24 * time.Hour,
		FeedCheck:    5 * time.Second,
		Limits:       event.DefaultLimits(),
		Now:          time.Now,
		Logger:       slog.Default(),
	}
}

const (
	maxBucketBytes = 64
	// maxControlLine is the server's default max_control_line: a protocol line (HPUB
	// or HMSG with its subject and reply) longer than this closes the connection.
	maxControlLine = 4096
	// replyBytes is room for a reply subject ("_INBOX." and two NUIDs) and a
	// protocol line's verb and sizes.
	replyBytes = 128
)

// longestSubject is the longest subject the transport sends for a task_id of the
// limits: a direct get of the key's last message by subject.
func (c Config) longestSubject(l event.Limits) int {
	return len("$JS.API.DIRECT.GET.KV_"+c.Bucket+".") + len(c.subjectPrefix()) + MaxKeyBytes(l.MaxTaskIDBytes)
}

// subjectPrefix is "$KV.<bucket>.": a key's subject is it and the key.
func (c Config) subjectPrefix() string { return "$KV." + c.Bucket + "." }

// stream is the stream's name.
func (c Config) stream() string { return "KV_" + c.Bucket }

func (c Config) validate(l event.Limits) error {
	if n := len(c.Bucket); n == 0 || n > maxBucketBytes {
		return configerr.New("jetstream.Config.Bucket", "%d bytes, want 1..%d", n, maxBucketBytes)
	}
	for i := 0; i < len(c.Bucket); i++ {
		if !plain(c.Bucket[i]) {
			return configerr.New("jetstream.Config.Bucket", "%q: byte %q at %d; use only [A-Za-z0-9_-]", c.Bucket, c.Bucket[i], i)
		}
	}
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return configerr.New("jetstream.Config.Replicas", "%d, want 1..5 (JetStream's range)", c.Replicas)
	case c.MaxAttempts < 1:
		return fmt.Errorf("jetstream: MaxAttempts: %d, want at least 1", c.MaxAttempts)
	case c.OutboxBytes < int64(l.EventBytes()):
		return fmt.Errorf("jetstream: OutboxBytes: %d, want at least one event of the limits (%d bytes)", c.OutboxBytes, l.EventBytes())
	case c.Publishers < 1:
		return fmt.Errorf("jetstream: Publishers: %d, want at least 1", c.Publishers)
	case c.TombstoneTTL < minTombstoneTTL:
		return configerr.New("jetstream.Config.TombstoneTTL", "%s, want at least %s (the shortest message TTL of a NATS server)", c.TombstoneTTL, minTombstoneTTL)
	case c.FeedCheck <= 0:
		return configerr.New("jetstream.Config.FeedCheck", "%s, want > 0 (DefaultConfig has 5s)", c.FeedCheck)
	case c.Now == nil:
		return fmt.Errorf("jetstream: Now: nil; use time.Now")
	case c.Logger == nil:
		return fmt.Errorf("jetstream: Logger: nil; use slog.Default()")
	}
	if n := c.longestSubject(l) + replyBytes; n > maxControlLine {
		return fmt.Errorf("jetstream: a task_id of %d bytes (the limits' MaxTaskIDBytes) makes subjects of up to %d bytes with bucket %q, "+
			"over the server's default max_control_line (%d); use a shorter bucket or task_id limit", l.MaxTaskIDBytes, n, c.Bucket, maxControlLine)
	}
	return nil
}
