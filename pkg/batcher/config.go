package batcher

import (
	"log/slog"
	"time"

	"github.com/fanout/fanout/pkg/configerr"
)

// DefaultConfig returns the defaults. The reason for each is next to it.
func DefaultConfig[T any]() Config[T] {
	return Config[T]{
		// Eureka's maxElementsInPeerReplicationPool: about a minute of a busy
		// registry's changes for one peer, a few MiB of small events.
		MaxBuffer: 10000,
		// Eureka's BATCH_SIZE: big enough to amortise a round trip, small enough
		// that one Replicate call stays well under the gRPC message limit.
		MaxBatch: 250,
		// Ours: 64 MiB. The count bound alone let a peer that is down hold
		// MaxBuffer events of any size: 10,000 × 1 MiB is 10 GiB per peer. 64 MiB
		// keeps 10,000 events of up to 6.5 KiB, as before, and bounds a node with
		// ten dead peers to 640 MiB of pending events.
		MaxBufferBytes: 64 << 20,
		// Ours: 4 MiB. A full batch of 250 events of up to 16 KiB fits, so small
		// events batch by count exactly as before; bigger ones batch by bytes, so one
		// Replicate call stays a few milliseconds on a LAN and a receiver holds at
		// most Workers such calls per sender.
		MaxBatchBytes: 4 << 20,
		// Ours: an idle worker sends at once. Under load the workers are busy and
		// batches grow by themselves; Eureka's 500ms put that latency on every event.
		MaxBatchingDelay: 0,
		// Off: with a batching delay set, this reproduces Eureka's pacing exactly
		// (Eureka has no such rule). It matters only once MaxBatchingDelay > 0.
		IdleFlush: 0,
		// Measured (BenchmarkPipeline, docs/BENCHMARKS.md): the loopback plateau
		// starts at 4; 8 leaves headroom for a LAN round trip. Eureka uses 20 threads
		// per peer, which a 2-core pod cannot use.
		Workers: 8,
		// Seed 000: a busy peer recovers quickly, so pause briefly.
		CongestionRetryDelay: 100 * time.Millisecond,
		// Seed 000: a dead peer deserves the longer pause (Eureka swaps the two).
		NetworkFailureRetryDelay: time.Second,
		// Offers waiting for the acceptor. One Offer is one Submit, so this absorbs
		// bursts of 1024 requests before Submit feels back pressure.
		AcceptorQueue: 1024,
		// Real time; tests inject a fake.
		Now: time.Now,
		// Quiet unless the caller passes its logger in.
		Logger: slog.New(slog.DiscardHandler),
	}
}

// Validate checks c as New would, without changing it: a caller that makes batchers
// later (a peer set that grows) refuses a bad config at its own start.
func (c Config[T]) Validate() error { return c.validate() }

// validate checks c and fills the zero-valued Now and Logger with their defaults. It
// returns the first field it refuses, as a *configerr.Error.
func (c *Config[T]) validate() error {
	if err := c.validateSizes(); err != nil {
		return err
	}
	if err := c.validateDelays(); err != nil {
		return err
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func (c *Config[T]) validateSizes() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"batcher.Config.MaxBuffer", c.MaxBuffer},
		{"batcher.Config.MaxBatch", c.MaxBatch},
		{"batcher.Config.MaxBufferBytes", c.MaxBufferBytes},
		{"batcher.Config.MaxBatchBytes", c.MaxBatchBytes},
		{"batcher.Config.Workers", c.Workers},
		{"batcher.Config.AcceptorQueue", c.AcceptorQueue},
	} {
		if f.v <= 0 {
			return configerr.New(f.name, "must be > 0, got %d", f.v)
		}
	}
	if c.MaxBatch > c.MaxBuffer {
		return configerr.New("batcher.Config.MaxBatch", "must be <= batcher.Config.MaxBuffer (%d), got %d", c.MaxBuffer, c.MaxBatch)
	}
	if c.MaxBatchBytes > c.MaxBufferBytes {
		return configerr.New("batcher.Config.MaxBatchBytes", "must be <= batcher.Config.MaxBufferBytes (%d), got %d", c.MaxBufferBytes, c.MaxBatchBytes)
	}
	return nil
}

func (c *Config[T]) validateDelays() error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"batcher.Config.MaxBatchingDelay", c.MaxBatchingDelay},
		{"batcher.Config.IdleFlush", c.IdleFlush},
		{"batcher.Config.CongestionRetryDelay", c.CongestionRetryDelay},
		{"batcher.Config.NetworkFailureRetryDelay", c.NetworkFailureRetryDelay},
	} {
		if f.v < 0 {
			return configerr.New(f.name, "must be >= 0, got %v", f.v)
		}
	}
	return nil
}
