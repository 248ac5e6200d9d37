package batcher

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Sentinel errors.
var (
	// ErrStopped is returned by Offer once Close has been called.
	ErrStopped = errors.New("batcher: stopped")
)

// Task is one unit of work keyed by ID. Tasks with the same ID coalesce: while a task
// waits in pending, a later one with the same ID replaces it, unless Config.Newer says
// the waiting one supersedes it.
type Task[T any] struct {
	// ID is the coalescing key (the event's task_id).
	ID string
	// Value is what the Processor sends. The batcher never looks inside it.
	Value T
	// Submitted is when the origin accepted the task (reported, never interpreted).
	Submitted time.Time
	// Expires is when the task is dropped as expired if it has not been sent yet.
	// The zero time means never.
	Expires time.Time
}

// Class is the outcome of sending a whole batch.
type Class int

const (
	// Success: the peer answered; Result.Items has one ItemOutcome per task.
	Success Class = iota
	// Congestion: the peer is overloaded (RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED).
	// The batch is reprocessed and the peer paused for CongestionRetryDelay.
	Congestion
	// NetworkFailure: the peer could not be reached (UNAVAILABLE, connection error,
	// open breaker). The batch is reprocessed and the peer paused for
	// NetworkFailureRetryDelay.
	NetworkFailure
	// Permanent: any other error. The batch is dropped and counted.
	Permanent
	// TooLarge (ours): the peer refused the batch as bigger than it accepts (gRPC's
	// RESOURCE_EXHAUSTED "message larger than max"). Retrying the same batch cannot
	// help, and it is not congestion: a batch of several tasks is split (handed back,
	// and the next batches carry at most half its bytes), and a task refused alone
	// is dropped as FateTooLarge.
	TooLarge
)

// ItemOutcome is the peer's verdict on one task of a successful batch.
type ItemOutcome int

const (
	// ItemOK: delivered.
	ItemOK ItemOutcome = iota
	// ItemStale: the peer already had this version or a newer one. Done.
	ItemStale
	// ItemBusy: the peer could not take it now. Reprocessed after the congestion pause.
	ItemBusy
	// ItemInvalid: the peer refused it. Dropped and counted as permanent.
	ItemInvalid
)

// Result is what a Processor returns for one batch.
type Result struct {
	Class Class
	// Items has one outcome per task, in batch order, when Class is Success.
	// A Success result whose Items length differs from the batch is treated as
	// Permanent.
	Items []ItemOutcome
	// Err describes a failure (logged, rate-limited). Optional.
	Err error
}

// Processor sends one batch. It is called from worker goroutines, concurrently, at
// most Config.Workers calls at a time. It must honour ctx: Close cancels it and waits
// for every call to return. The batch slice belongs to the batcher and is reused once
// Process returns, so Process must not keep it or modify it. A panic is recovered and
// counted as Permanent for that batch.
type Processor[T any] interface {
	Process(ctx context.Context, batch []Task[T]) Result
}

// ProcessorFunc adapts a function to Processor.
type ProcessorFunc[T any] func(ctx context.Context, batch []Task[T]) Result

// Process calls f.
func (f ProcessorFunc[T]) Process(ctx context.Context, batch []Task[T]) Result { return f(ctx, batch) }

// Fate is how a task left the batcher for good.
type Fate int

const (
	FateSucceeded  Fate = iota // peer answered OK
	FateStale                  // peer answered STALE (it had this or newer)
	FateOverridden             // superseded by another task with the same ID (Config.Newer)
	FateOverflow               // evicted because pending was full
	FateExpired                // Expires passed before it was sent
	FatePermanent              // permanent batch error or ItemInvalid
	FateStopped                // still queued when the batcher was closed
	FateTooLarge               // the peer refused it, alone, as too large (TooLarge)
)

// Gate lets something outside the batcher hold dispatch (the circuit breaker). It is consulted by the acceptor goroutine before assigning work; a non-zero
// duration means "hold for at least this long". Optional.
type Gate interface {
	Hold(now time.Time) time.Duration
}

// Config holds the knobs of one per-peer batcher. It is copied by New; DefaultConfig
// gives the defaults.
type Config[T any] struct {
	// MaxBuffer bounds pending. Default 10000 (Eureka maxElementsInPeerReplicationPool).
	MaxBuffer int
	// MaxBatch is the largest batch handed to a worker. Default 250 (Eureka BATCH_SIZE).
	MaxBatch int
	// MaxBufferBytes (ours) bounds pending in bytes, as Size measures its tasks, beside
	// MaxBuffer's bound in tasks: an arrival that would pass it evicts the oldest tasks
	// (FateOverflow), and a retry that would pass it is dropped (FateOverflow), as the
	// count bound does. A task bigger than MaxBufferBytes on its own never enters
	// (FateOverflow). Default 64 MiB.
	MaxBufferBytes int
	// MaxBatchBytes (ours) bounds one batch in bytes, as Size measures its tasks: a
	// batch takes tasks from the head while their sizes add up to at most this, and
	// stops at the first that does not fit. Its first task is always taken, so a task
	// bigger than MaxBatchBytes travels alone. A batch is also due once the ready
	// tasks add up to MaxBatchBytes. At most MaxBufferBytes. Default 4 MiB.
	MaxBatchBytes int
	// Size measures a task's value for MaxBatchBytes and MaxBufferBytes, e.g. its
	// encoded size in the request the Processor sends. It is called once per Offer
	// of a task, from the acceptor goroutine; it must not block, must not modify the
	// value, and must return the same size every time for the same value. Nil: every
	// task measures 0, and only the bounds in tasks apply.
	Size func(v T) int
	// MaxBatchingDelay: a batch is due when pending holds MaxBatch tasks or the oldest
	// task has waited this long. Default 0: an idle worker takes whatever is pending
	// at once (Eureka waits 500ms, which puts that latency on every event).
	MaxBatchingDelay time.Duration
	// IdleFlush (ours): with MaxBatchingDelay > 0, a batch is also due once no new
	// task has arrived through Offer for this long. The submissions went quiet, so
	// waiting longer can coalesce nothing more: sustained load keeps the whole
	// window, and the tail after a burst goes out after IdleFlush instead of
	// MaxBatchingDelay. Retries are not arrivals. No effect when MaxBatchingDelay
	// is 0. Default 0: off, Eureka's pacing exactly (Eureka has no such rule).
	IdleFlush time.Duration
	// Workers is the number of concurrent sends to this peer. Default 8, chosen by
	// BenchmarkPipeline (docs/BENCHMARKS.md); Eureka uses 20.
	Workers int
	// CongestionRetryDelay pauses the peer after congestion. Default 100ms (seed 000).
	CongestionRetryDelay time.Duration
	// NetworkFailureRetryDelay pauses the peer after a network failure. Default 1s
	// (seed 000; a dead peer deserves the longer pause).
	NetworkFailureRetryDelay time.Duration
	// AcceptorQueue bounds the number of Offer calls waiting for the acceptor; once it
	// is full, Offer blocks. Default 1024.
	AcceptorQueue int

	// Now reads the clock. Default time.Now. Tests inject a fake.
	Now func() time.Time
	// Logger receives rate-limited logs of dropped tasks and errors. Default: discard.
	Logger *slog.Logger
	// Newer, if set, reports whether a supersedes b, two tasks with the same ID. It
	// makes coalescing keep the task that supersedes, never merely the latest
	// arrival: an app's [v10, v5] must send v10, and a version older than
	// the one pending or in flight would only be answered STALE by the peer. Wherever
	// two tasks of one ID meet (an arrival and the task pending or in flight, a retry
	// and the task pending), the later one wins unless Newer(earlier, later); the
	// loser ends as FateOverridden. The batcher never looks inside Value, so only the
	// caller can compare. Nil: the later arrival always wins, as before Newer existed.
	// It must be a strict order (irreflexive and transitive, like a less-than), must
	// not block, and must not modify or keep a or b; it is called from the acceptor
	// goroutine, and a or b may be a task a worker is sending.
	Newer func(a, b *Task[T]) bool
	// OnFinal, if set, is called exactly once for every task that leaves the batcher
	// for good, from the acceptor goroutine (or from Close for FateStopped). It must
	// not block, and t is valid only during the call.
	OnFinal func(t *Task[T], fate Fate)
	// OnPark (ours), if set, is called from the acceptor goroutine when a task parks
	// behind the task of its ID in flight: it is sent only once that flight's result
	// is in, so a Processor that lets results wait (a peer holding answers) hears
	// that one is awaited. It must not block.
	OnPark func()
	// Gate, if set, can hold dispatch (circuit breaker).
	Gate Gate
	// Budget (ours), if set, bounds the pending tasks of every batcher that shares
	// it, together, in bytes: each task's Size plus what its holder costs. A batcher
	// over its share (the budget over the batchers) evicts its oldest pending tasks
	// while the budget is over its limit (FateOverflow, counted in BudgetEvicted);
	// see Budget. Nil: this batcher's own bounds only.
	Budget *Budget
}

// Stats is a snapshot of one batcher's counters (events since start) and gauges.
type Stats struct {
	// Counters.
	Accepted, Overridden, Overflow, Expired, Replayed, Succeeded uint64
	Congestion, Transient, Permanent, Stale                      uint64
	// TooLarge counts the tasks dropped as FateTooLarge: the peer refused them alone.
	TooLarge uint64
	// BudgetEvicted counts the tasks that ended as FateOverflow (also counted in
	// Overflow) because of Config.Budget rather than this batcher's own bounds.
	BudgetEvicted uint64
	// Gauges, all counted in tasks except IdleWorkers and PendingBytes. AcceptorQueue
	// includes the tasks of Offer calls blocked on a full queue.
	AcceptorQueue, ReprocessQueue, Pending, InFlight, IdleWorkers uint64
	// PendingBytes is pending's size, as Config.Size measures it (0 without Size).
	PendingBytes uint64
}
