/*
Package batcher is the per-peer acceptor/worker batcher of fanout:
Eureka's TaskDispatcher, AcceptorExecutor and TrafficShaper (seeds 000 and 002),
rebuilt around one goroutine that owns all the state, with a few changes of ours.

There is one Batcher per peer. It never imports gRPC: what a batch is sent with,
and what a failure means, is the Processor's business. A bad peer fills and drops
its own batcher only; the others never notice (Eureka's bulkhead).

# The API

	b, err := batcher.New(cfg, processor) // starts the acceptor and cfg.Workers workers
	err = b.Offer(ctx, tasks)             // one Submit's events for this peer
	s := b.Stats()                        // counters and gauges, from any goroutine
	err = b.Drain(ctx)                    // wait until everything has left
	b.Close()                             // stop; what is left ends as FateStopped

# The life of a task

Follow one event, task_id "register#ORDERS/i-17", from Submit to its fate.

1. Offer. The dispatcher calls Offer once per peer with the same []Task slice: one
channel send per Submit, however many events it carries. The send goes to the
acceptor queue, a channel of Config.AcceptorQueue offers. While it is full, Offer
blocks (back pressure onto Submit) until ctx ends or Close is called. The batcher
never writes to the slice, so every peer's batcher can share it.

2. The acceptor. One goroutine owns everything below: pending, the processing
order, the in-flight marks, the reprocess queue, the idle-worker count and the
traffic shaper. It sleeps in a select on the acceptor queue, the workers'
completions, Drain requests and one timer, and after each event runs one step:

  - Step 1: drain the reprocess queue (see 6).
  - Step 2: drain the acceptor queue. Our task goes into pending, an index from
    task_id to a holder (ids.go: open addressing that churn leaves no tombstones
    in) plus the processing order, an intrusive list with the oldest
    at the head. If "register#ORDERS/i-17" is already waiting, the two coalesce
    into one, which keeps the waiting one's place and age; the other's fate is
    FateOverridden. Which one survives is the coalescing rule below. If pending
    holds MaxBuffer tasks, the head (the oldest) is evicted as FateOverflow to make
    room: the newest state wins. Pending is bounded in bytes too (ours): with
    Config.Size, the oldest tasks are evicted while our task would take pending
    past MaxBufferBytes (a bigger version replacing a waiting one evicts the oldest
    others), and a task bigger than MaxBufferBytes on its own never enters: it is
    FateOverflow at once.
  - The node's budget (ours, Config.Budget): every batcher of a node charges one
    Budget with its pending tasks (their sizes, plus what a holder costs). While
    the batchers together hold more than its limit, one over its share (the limit
    over the batchers) evicts its oldest tasks (FateOverflow, counted in
    BudgetEvicted); a batcher that is not sending (its last batch failed, or its
    dispatch is held) does the same against half the limit, so the peers that are
    sending keep the other half for their bursts. A batcher within its share always gets room: the others
    make it at their next step, woken by the budget. See Budget.
  - Step 3: ask the traffic shaper and the optional Gate (the circuit breaker)
    whether to hold; if so, assign nothing and set the timer for the end of the hold.
  - Step 4: while a worker is idle and a batch is due, pop up to MaxBatch holders
    from the head and hand them to that worker, stopping at the first that would
    take the batch past MaxBatchBytes (the first is always taken, so a task bigger
    than that travels alone). A batch is due when MaxBatch tasks, or MaxBatchBytes,
    are ready or the oldest ready one has waited MaxBatchingDelay. With
    MaxBatchingDelay > 0 and IdleFlush > 0 (ours), a batch is also due once no new
    task has been accepted for IdleFlush: the submissions went quiet, so waiting
    longer can coalesce nothing more. Expired tasks are dropped on the way
    (FateExpired). If nothing is due yet, the timer is set for when a batch will be:
    the head's MaxBatchingDelay or the idle flush, whichever comes first.

The coalescing rule: wherever two tasks of one task_id meet, the later
one wins unless Config.Newer says the earlier one supersedes it. fanout sets Newer
to compare event versions, so coalescing keeps the highest version, never merely
the latest arrival: an app's [v10, v5] sends v10, and v500 arriving while v1000
waits ends as FateOverridden, v1000 keeping its place. Ties go to the later
arrival. Without Newer the later arrival always wins, as in Eureka.

The acceptor hands out work only to a worker that is idle (lazy dispatch), so the
batch channel never fills and a task waits in pending, where it can still be
coalesced, rather than in a queue behind a busy worker.

3. In flight. Our task is now in a batch, and its task_id is marked in flight.
If a later "register#ORDERS/i-17" arrives meanwhile, it waits in pending, parked:
it keeps its place but is not handed to another worker until this batch completes
(one in process, at most one waiting; seed 004). So two tasks of one task_id are
never sent at once, and cannot reach the peer in the other order. With Newer, an
arrival that the task in flight supersedes does not park: it ends as
FateOverridden at once, since the peer would only answer it STALE. For that
comparison the holder points at its task in the batch while it flies.

4. The worker calls Processor.Process(ctx, batch) with the batcher's context; the
Processor sets its own deadline. A panic in Process is recovered and the batch
counts as Permanent. The worker reports the Result to the acceptor and waits for
its next batch. Workers never die.

5. The result, applied by the acceptor, which first clears the in-flight marks
(unparking any task waiting behind them):

  - Success: per item, ItemOK ends as FateSucceeded and ItemStale (the peer had this
    version or newer) as FateStale. ItemBusy goes to the reprocess queue and pauses
    the peer for CongestionRetryDelay. ItemInvalid ends as FatePermanent.
  - Congestion: the whole batch goes to the reprocess queue; pause CongestionRetryDelay.
  - NetworkFailure: the whole batch goes to the reprocess queue; pause
    NetworkFailureRetryDelay.
  - Permanent (or a Success with the wrong number of items): every task ends as
    FatePermanent, logged at a limited rate.
  - TooLarge (ours; the peer refused the request as bigger than it accepts): a
    batch of several tasks is split. Its tasks go to the reprocess queue, with no
    pause, and from now on a batch takes at most half the refused one's bytes (half
    its tasks if Size measured it at nothing). A task refused alone ends as
    FateTooLarge, logged with its task_id: no batch can carry it. Each split lowers
    what a batch of several can be below what was refused, so nothing is retried
    forever; halving bytes rather than tasks means one huge task ends alone while
    the small ones around it still go out together. The limits double back after a
    success a minute after they last changed, so a peer whose limit was raised gets
    full batches again.

6. Reprocess. At step 1 of the same round, handed-back tasks go back to the
front of the processing order, in the order they were sent, while pending has
room. A retry that expired ends as FateExpired. One whose task_id has a task
waiting meets it by the coalescing rule: the waiting one came later, so the retry
ends as FateOverridden, unless Newer says the retry supersedes it; then the retry
goes to the front with its own age, as retries do, and the waiting one ends as
FateOverridden. Once pending is full, the remaining retries end as FateOverflow:
retries are dropped before new tasks. The shaper holds dispatch until
the pause has passed since the last failure (the longer pause wins when both
apply), and then our task goes out again in the next batch.

OnFinal, if set, is called exactly once per task with its fate. Stats counts the
same events; the gauges show the acceptor queue, reprocess queue, pending, in
flight and idle workers.

# Stopping

Drain waits, without polling, until the acceptor queue, the reprocess queue,
pending and in flight are all empty: the acceptor answers when it sees them empty.
A sidecar calls it on SIGTERM with its shutdown timeout. Close cancels the
context every Process call got, waits for the acceptor and every worker, applies
the results that came back, and ends everything else as FateStopped. It is
idempotent; Offer afterwards returns ErrStopped.

# How we differ from Eureka

  - MaxBatchingDelay defaults to 0, not 500ms: an idle worker sends at once, and
    under load batches grow by themselves because the workers are busy.
  - In-flight exclusion: Eureka's 20 parallel workers can deliver two versions of
    one task_id out of order; ours cannot.
  - Coalescing keeps the highest version (Config.Newer), where Eureka keeps the
    latest arrival: an older version offered late never replaces a newer one, and
    is not sent behind a newer one in flight.
  - Workers never die; Eureka's die on an unexpected exception (issue #1497).
  - The retry delays are the seed's: 100ms after congestion and 1s after a network
    failure. Eureka's code passes them the other way round. And the shaper honours
    both pauses, where Eureka looks at the network pause only once the congestion
    pause is over.
  - No polling: the acceptor sleeps on channels and one timer instead of waking
    every 10ms, and there is no single-item work queue.
  - The age that MaxBatchingDelay measures is the slot's, kept across overrides and
    retries, so a hot task_id at the head cannot postpone a batch forever.
  - Bounded in bytes (ours): pending (MaxBufferBytes) and each batch
    (MaxBatchBytes), as Config.Size measures tasks, beside Eureka's bounds in tasks.
    A batch its peer refuses as too large is split, not retried as congestion.
  - Idle flush (ours, off by default): with a coalescing window
    (MaxBatchingDelay > 0), IdleFlush > 0 sends a waiting batch early once no new
    task has been accepted for IdleFlush. Sustained load keeps the whole window and
    coalesces as before; the tail after a burst goes out after IdleFlush instead of
    waiting out the window, so convergence after the publisher stops takes
    IdleFlush + transit rather than window + transit. Handed-back tasks are not new
    arrivals: after a pause they go out as soon as the pause ends if the submissions
    are already quiet. Off (0), the pacing is exactly Eureka's.

# Testing

The acceptor's rules live in an unexported core type that starts no goroutine and
reads no clock: tests call accept, drainReprocess, assign, complete and nextWake
with an explicit time, compare it step by step against a naive reference model,
and fuzz it. The goroutines around it are thin.
*/
package batcher
