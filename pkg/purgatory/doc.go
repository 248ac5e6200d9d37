// Package purgatory holds operations that wait for something, by key, until
// they can complete or their deadline passes (seed 003, after Kafka's
// DelayedOperation and DelayedOperationPurgatory). For fanout the
// operation is a Submit waiting for acks, watched under (peer, task_id) keys,
// completed by acks or by its ack_timeout.
//
// # The operation
//
// A user type embeds Op, calls Init(self, deadline), and implements
// DelayedOperation:
//
//   - TryComplete checks the condition (enough acks?) and, if it holds, calls
//     ForceComplete and returns its result;
//   - OnComplete does the work (answers the call); it runs exactly once, on
//     the goroutine that won;
//   - OnExpiration runs just before OnComplete when the deadline won.
//
// Op.ForceComplete is the single gate: a compare-and-swap on a completed
// flag. Of all the goroutines racing to complete one operation (acks through
// TryComplete, a direct ForceComplete, the wheel's expiry, Cancel) exactly
// one wins the swap; it stops the timer and calls the callbacks. The losers
// return false and touch nothing.
//
// # Life of an operation
//
// A Submit with ack=QUORUM to three peers builds op, Init(op, now+5s), and
// calls TryCompleteElseWatch(op, keys) with one key per peer:
//
//  1. TryComplete. With no peers the policy already holds: ForceComplete runs
//     OnComplete, the call returns true, and nothing is watched or scheduled.
//  2. Otherwise op is appended to the watch list of each key (a key's list is
//     created on first use) and Watched grows by three.
//  3. TryComplete again. An ack that arrived between steps 1 and 2 ran its
//     CheckAndComplete before op was on the list, so nobody would have retried
//     op for it; this second try sees it (Kafka's race-closing retry).
//  4. The deadline goes on the timing wheel (Delayed grows by one). If op
//     completed while the timer was being published, the timer is stopped at
//     once. The call returns false, and op waits.
//
// Then one of these happens first:
//
//   - An ack: the caller records it where op's TryComplete will see it and
//     calls CheckAndComplete(key). The key's list is copied under the lock
//     and, outside it, each uncompleted op is retried (under the op's own
//     mutex, so one op's TryComplete never runs twice at once). When the
//     quorum is reached TryComplete calls ForceComplete: the timer is stopped,
//     OnComplete answers Submit. Completed ops are removed from this key's
//     list, and the key from the map if its list empties.
//   - The deadline: the wheel's driver runs the timer's callback, which wins
//     the swap and calls OnExpiration then OnComplete (Submit answers with
//     satisfied=false). Op stays on its three lists for now.
//   - The client goes away: the handler calls Cancel(op). Op is marked
//     completed without callbacks (nobody is listening), its timer is stopped
//     and it is removed from its lists at once.
//
// # Garbage
//
// An op completed through one key, by the deadline or by ForceComplete is
// still on the other keys' lists. A later CheckAndComplete of those keys
// drops it, but a key may never be checked again. So, as in Kafka, the
// purgatory estimates the completed ops still listed (ops watched since the
// last purge minus ops still delayed) and, when that exceeds
// Config.PurgeInterval, sweeps every list, deleting empty keys. The check
// runs after TryCompleteElseWatch, CheckAndComplete and every expiry. A Go
// map keeps its memory after deletes, so a purge also rebuilds the map once
// it has shrunk below a quarter of its peak: many distinct keys over time
// cost no more memory than many at once.
//
// # Ownership and locking
//
// The caller owns the timing wheel and its driver (Config.Wheel); several
// purgatories may share one. Expiry callbacks, and so OnExpiration and
// OnComplete of expired ops, run on the wheel's driver goroutine, so they must
// be short and must not block. One mutex guards the key map and its lists; it
// is never held while user code runs, so callbacks may call back into the
// purgatory. Watched and Delayed are atomic counters for metrics.
package purgatory
