// Package timingwheel is a hierarchical timing wheel (seed 003, after Kafka's
// TimingWheel and SystemTimer): O(1) Add and Stop for the deadlines of the
// purgatory's waiting operations, where the runtime's timers cost
// O(log n) a heap operation and a goroutine per expiry.
//
// # Shape
//
// A level is a ring of Config.Slots buckets, each bucket a doubly linked list
// of Timers (the Timer is the list node, so unlinking is O(1)). Level 0's
// buckets are Config.Tick wide; level i+1's buckets are as wide as all of
// level i (its span, Tick*Slots^(i+1)). With the defaults, 1ms and 20 slots,
// the levels span 20ms, 400ms, 8s, 160s, 53m20s, ... Levels are added when a
// deadline first needs one, so a wheel that only ever sees 5s deadlines has
// three.
//
// The wheel never reads the clock. Its time moves only when its owner calls
// Advance(now). Production code starts a Driver (StartDriver), which owns a
// goroutine and a time.Ticker and calls Advance(now()) every interval; the
// code that starts it stops it. Tests call Advance themselves, with whatever
// times they like: no sleeps.
//
// # Life of a timer
//
// Take the defaults, a wheel at time 0 (Config.Start), and Add(5s+3ms, fn).
//
// Add files the timer in the finest level whose window, the Slots buckets
// starting at the one holding the wheel's time, reaches its deadline. Level 0
// reaches 20ms, level 1 400ms, level 2 8s: the timer goes to level 2, whose
// buckets are 400ms wide, into bucket deadline/400ms = 12 (slot 12 % 20),
// which covers [4.8s, 5.2s). That is a pointer push under the wheel's mutex.
//
// The driver advances the wheel, 1ms at a time. Each Advance empties the
// buckets that the clock has entered or passed since the previous one: the
// level 0 bucket of the old time through that of the new, and on a coarser
// level only when the clock crosses one of its bucket boundaries. So for 4.8s
// nothing touches our timer. When the clock enters [4.8s, 5.2s), Advance
// empties level 2's bucket 12 and files each of its timers again relative to
// the new time: ours is now 203ms away and lands in level 1, bucket
// 5.003s/20ms = 250 (slot 10), covering [5.0s, 5.02s). At 5.0s that bucket is
// emptied and the timer drops to level 0, bucket 5003 (slot 3). At 5.003s
// level 0's bucket 5003 is emptied, the timer's deadline is at or before the
// wheel's time, and it is due. Each timer is moved at most once per level.
//
// A timer's deadline is honoured exactly, not rounded to the tick: the level 0
// bucket holding the wheel's time is re-examined by every Advance, and a timer
// in it runs at the first Advance whose time reaches its deadline. A deadline
// at or before the wheel's time (Add in the past) goes to an "expired" list
// that the next Advance drains, whatever its argument: Add never runs a
// callback itself, so it is safe to call while holding locks the callback
// takes.
//
// Advance collects the due timers under the mutex, sorts them by (deadline,
// Add order), releases the mutex and then runs them, one after another, on
// its own goroutine. So callbacks run in deadline order within an Advance,
// ties in Add order, and never two at once (Advance calls are serialized).
// A callback may Add, AfterFunc and Stop timers, its own included; it must
// not call Advance (that deadlocks) and should be short: it delays every later
// timer. A Stop that lands after the timer was collected but before its turn
// still wins: the timer's state is a compare-and-swap between Stop and the
// runner, so Stop returns true exactly when the callback will not run.
//
// # Long jumps
//
// Kafka keeps the non-empty buckets in a DelayQueue so that an idle wheel
// sleeps. Here the driver ticks regardless, and an Advance over an idle wheel
// costs a lock and a few integer divisions. A jump across many ticks (a
// stalled driver, a test advancing an hour) empties at most Slots buckets per
// level, since a jump wider than a level's span visits each of its buckets
// once: an hour's jump with 1ms x 20 costs about 100 bucket visits, not 3.6
// million.
//
// # Locking
//
// One mutex, Wheel.mu, guards the levels and buckets; Add and Stop hold it for
// a few pointer writes. Advance holds a second mutex, advanceMu, for its whole
// run, and mu only while it collects. Len is an atomic counter.
package timingwheel
