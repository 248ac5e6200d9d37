package batcher

import (
	"log/slog"
	"time"
)

// splitRecovery is how long after a split (a TooLarge result) the batch limit may
// double back, one doubling per success: a minute costs a peer whose limit stays
// below this node's batches one refused batch a minute, and gives one whose limit
// was raised full batches again within minutes.
const splitRecovery = time.Minute

// batch is the work of one worker: the tasks it sends and, once sent, the result.
// Batches are recycled through core.spare.
type batch[T any] struct {
	// tasks is handed to Processor.Process. Owned by the worker between assign and
	// complete, by the acceptor otherwise; meanwhile the acceptor only reads it,
	// through holder.sent.
	tasks []Task[T]
	// arrived[i] is tasks[i]'s holder.arrived, kept for a retry.
	arrived []time.Time
	// slots[i] is the holder that marks tasks[i].ID in flight.
	slots []*holder[T]
	// sizes[i] is tasks[i]'s size (Config.Size), kept for a retry.
	sizes []int
	// result is set by the worker before it hands the batch back.
	result Result
}

// core is the deterministic heart of the batcher: the acceptor's state and the rules
// of the batcher, driven by explicit calls and an explicit now, raft-style. It starts no
// goroutine and reads no clock. Every field is owned by the acceptor goroutine (by
// Close once the acceptor has exited); tests drive it directly.
type core[T any] struct {
	// Settings, fixed by newCore.
	maxBuffer      int                      // Invariant: len(pending) <= maxBuffer
	maxBatch       int                      // Invariant: 0 < maxBatch <= maxBuffer
	maxBufferBytes int                      // Invariant: bytes <= maxBufferBytes
	maxBatchBytes  int                      // Invariant: 0 < maxBatchBytes <= maxBufferBytes
	size           func(T) int              // Config.Size; may be nil: every task measures 0
	delay          time.Duration            // MaxBatchingDelay
	idleFlush      time.Duration            // IdleFlush; used only while delay > 0
	gate           Gate                     // may be nil
	newer          func(a, b *Task[T]) bool // Config.Newer; may be nil: see keeps
	onFinal        func(*Task[T], Fate)
	onPark         func() // Config.OnPark; may be nil
	log            rateLog
	// splitRecovery is how long a split holds before batchLimit may double back
	// (splitRecovery, the constant; tests shorten it).
	splitRecovery time.Duration
	// budget is Config.Budget, the node's budget over every batcher's pending (may be
	// nil: this batcher's own bounds only); acct is this batcher's account in it.
	budget *Budget
	acct   *account
	// overhead is what the budget charges per pending task beside its size
	// (taskOverhead; tests change it).
	overhead int
	// charged is what acct holds: pending's charge (charge) as of the last flush.
	// Invariant: charged == acct.charged; charged == charge() after each entry
	// point (accept, drainReprocess, shed, assign, stopAll).
	charged int
	// failing: the last batch that completed did not reach the peer (NetworkFailure
	// or Congestion); a Success clears it. With hold, it tells the budget that this
	// batcher is not sending (isHeld), also between its pauses.
	failing bool
	// heldAt and held cache isHeld for overBudget, which asks once per task: valid
	// while heldAt == now and heldOK (complete, which changes failing and arms the
	// shaper, clears it), so one step reads the gate (a breaker's lock) once.
	heldAt       time.Time
	held, heldOK bool

	// ids maps every task_id that is pending, in flight or both to its holder, so
	// that a task costs a lookup, an insert and a delete from Offer to fate (ids.go).
	ids idIndex[T]
	// order is pending: the waiting holders in processing order.
	// Invariant: order.n <= maxBuffer.
	order order[T]
	// parked counts the waiting holders that are also flying.
	// Invariant: 0 <= parked <= flying.
	parked int
	// flying counts the tasks handed to a worker and not yet completed. An ID is in
	// at most one batch (in-flight exclusion).
	flying int
	// bytes is pending's size: the sum of holder.size over order.
	// Invariant: 0 <= bytes <= maxBufferBytes.
	bytes int
	// parkedBytes is the part of bytes that parked holders hold.
	// Invariant: 0 <= parkedBytes <= bytes.
	parkedBytes int
	// batchBytesLimit and batchLimit are the most bytes and tasks popBatch takes:
	// maxBatchBytes and maxBatch, lowered by each split (a TooLarge result for a batch
	// of several tasks, see tooLarge), doubled back by a success at least
	// splitRecovery after the last change. Invariant: 1 <= batchBytesLimit <=
	// maxBatchBytes; 1 <= batchLimit <= maxBatch.
	batchBytesLimit, batchLimit int
	// splitAt is when the limits last changed; zero: never.
	splitAt time.Time
	// reprocess holds tasks handed back by failed sends, in the order they came
	// back. drainReprocess empties it.
	reprocess []*holder[T]
	// idle counts workers without a batch. Invariant: 0 <= idle <= Workers.
	idle   int
	shaper shaper
	// lastAccept is the now of the last accept that took a task; zero: none yet.
	// The idle-flush rule (ours) measures from it.
	lastAccept time.Time

	free  *holder[T]  // recycled holders, linked by next
	spare []*batch[T] // recycled batches; at most Workers
	st    Stats       // counters; the gauges are filled in by stats
}

// newCore builds the core of a validated configuration.
func newCore[T any](cfg *Config[T]) *core[T] {
	return &core[T]{
		maxBuffer:      cfg.MaxBuffer,
		maxBatch:       cfg.MaxBatch,
		maxBufferBytes: cfg.MaxBufferBytes,
		maxBatchBytes:  cfg.MaxBatchBytes,
		size:           cfg.Size,
		delay:          cfg.MaxBatchingDelay,
		idleFlush:      cfg.IdleFlush,
		gate:           cfg.Gate,
		newer:          cfg.Newer,
		onFinal:        cfg.OnFinal,
		onPark:         cfg.OnPark,
		log:            rateLog{logger: cfg.Logger, interval: time.Second},
		splitRecovery:  splitRecovery,
		budget:         cfg.Budget,
		acct:           cfg.Budget.open(), // nil without a budget
		overhead:       taskOverhead[T](),
		// The least index: it doubles as pending grows, once per batcher, and a peer
		// that never holds much (most of a node's, with hundreds of peers) costs 256
		// bytes, not the 32 KiB of an index sized for 1,024 tasks.
		ids:             newIDIndex[T](0),
		idle:            cfg.Workers,
		batchLimit:      cfg.MaxBatch,
		batchBytesLimit: cfg.MaxBatchBytes,
		shaper: shaper{
			congestionDelay: cfg.CongestionRetryDelay,
			networkDelay:    cfg.NetworkFailureRetryDelay,
		},
	}
}

// accept is step 2 for the tasks of one Offer. tasks belongs to the caller and is
// only read.
func (c *core[T]) accept(tasks []Task[T], now time.Time) {
	if len(tasks) > 0 {
		c.lastAccept = now
	}
	c.st.Accepted += uint64(len(tasks))
	for i := range tasks {
		c.acceptOne(&tasks[i], now)
	}
	c.flush()
}

// acceptOne coalesces t into pending, evicting the oldest tasks while pending is
// full in tasks or in bytes. If t's ID is already pending or in flight, t is the
// later of the two: it replaces the pending task (in its place, with its age) or
// parks behind the flight, unless that task supersedes it (keeps). A t that loses is
// overridden and pending is left as it was. A t bigger than MaxBufferBytes alone, or
// than the whole budget, is overflow at once. With a budget, the oldest tasks are
// also evicted while the budget is over its limit and this batcher holds more than
// its share (overBudget).
func (c *core[T]) acceptOne(t *Task[T], now time.Time) {
	size := c.sizeOf(t)
	if size > c.maxBufferBytes || c.budget != nil && size+c.overhead > c.budget.limit {
		c.st.Overflow++
		c.countBudget(size <= c.maxBufferBytes)
		c.final(t, FateOverflow)
		c.log.note(logOverflow, 1, now, nil)
		return
	}
	hv, h := c.ids.find(t.ID)
	switch {
	case h == nil:
	case h.waiting:
		if c.keeps(&h.task, t) {
			c.override(t)
		} else {
			c.override(&h.task)
			c.replace(h, t, size, now)
		}
		return
	case c.keeps(h.sent, t): // only in flight: the peer would answer t STALE
		c.override(t)
		return
	}
	// Never evicts h: h is not waiting.
	for c.order.n > 0 {
		full := c.order.n >= c.maxBuffer || c.bytes+size > c.maxBufferBytes
		if !full && !c.overBudget(size+c.overhead, now) {
			break
		}
		c.evict(c.order.head, now, !full)
	}
	if h == nil {
		h = c.newHolder(t, now)
		c.ids.insert(hv, h)
	} else { // in flight: the newer version parks behind it
		h.task, h.arrived = *t, now
		if c.onPark != nil {
			c.onPark()
		}
	}
	h.size = size
	c.wait(h, false)
}

// replace puts t, of size bytes, in the place of h's waiting task, and evicts the
// oldest other tasks while pending is over MaxBufferBytes or over budget
// (overBudget). size is at most MaxBufferBytes, so h alone always fits; h is never
// evicted.
func (c *core[T]) replace(h *holder[T], t *Task[T], size int, now time.Time) {
	c.bytes += size - h.size
	if h.flying {
		c.parkedBytes += size - h.size
	}
	h.task, h.size = *t, size
	for c.order.n > 1 {
		full := c.bytes > c.maxBufferBytes
		if !full && !c.overBudget(0, now) {
			break
		}
		oldest := c.order.head
		if oldest == h {
			oldest = h.next
		}
		c.evict(oldest, now, !full)
	}
}

// evict drops h, a waiting holder, as overflow; forBudget: the budget, not this
// batcher's own bounds, made it go.
func (c *core[T]) evict(h *holder[T], now time.Time, forBudget bool) {
	c.unwait(h)
	c.st.Overflow++
	c.countBudget(forBudget)
	c.final(&h.task, FateOverflow)
	c.forget(h)
	c.log.note(logOverflow, 1, now, nil)
}

// countBudget counts a task dropped for the budget, if forBudget.
func (c *core[T]) countBudget(forBudget bool) {
	if forBudget {
		c.st.BudgetEvicted++
		c.budget.evicted.Add(1)
	}
}

// charge is what pending costs the budget: its tasks' sizes and overhead each.
func (c *core[T]) charge() int { return c.bytes + c.overhead*c.order.n }

// overBudget reports whether pending, extra bytes more, would be over budget: the
// batchers together over its limit, and this one over its share of it (the limit
// over the accounts). A batcher that is not sending (isHeld: its last batch failed,
// or its dispatch is held, a peer that is down or paused) sees half the limit: the
// peers that are not sending keep to half the budget, so the ones that are have the
// other half for their bursts. False without a budget. The others' part is what
// they last flushed.
func (c *core[T]) overBudget(extra int, now time.Time) bool {
	if c.budget == nil {
		return false
	}
	mine := c.charge() + extra
	total := int(c.budget.used.Load()) - c.charged + mine
	limit := c.budget.limit
	if total <= limit/2 {
		return false
	}
	if c.isHeld(now) {
		limit /= 2
	}
	return total > limit && mine > limit/c.budget.members()
}

// isHeld reports whether this batcher is not sending, for the budget: its last
// batch failed (failing), or dispatch is held (hold). Read once per now (heldAt).
func (c *core[T]) isHeld(now time.Time) bool {
	if !c.heldOK || !c.heldAt.Equal(now) {
		c.heldAt, c.held, c.heldOK = now, c.failing || c.hold(now) > 0, true
	}
	return c.held
}

// flush tells the budget what pending costs now. A charge that takes the budget
// over half its limit wakes the batchers over their share of that half (nudge):
// the held ones among them shed.
func (c *core[T]) flush() {
	if c.budget == nil {
		return
	}
	mine := c.charge()
	d := mine - c.charged
	if d == 0 {
		return
	}
	c.charged = mine
	c.acct.charged.Store(int64(mine))
	if used := c.budget.used.Add(int64(d)); d > 0 && used > int64(c.budget.limit/2) {
		c.budget.nudge(c.heldAt)
	}
}

// shed applies the budget's rule to this batcher: while it is over budget
// (overBudget), its oldest pending tasks are evicted (FateOverflow, counted in BudgetEvicted). Each eviction is flushed at
// once, so that batchers shedding at the same time see each other's progress and
// together shed about what the budget is over, not that many times.
func (c *core[T]) shed(now time.Time) {
	if c.budget == nil {
		return
	}
	for c.order.n > 0 && c.overBudget(0, now) {
		c.evict(c.order.head, now, true)
		c.flush()
	}
	c.flush()
}

// sizeOf is t's size by Config.Size; 0 without one (or for a negative size).
func (c *core[T]) sizeOf(t *Task[T]) int {
	if c.size == nil {
		return 0
	}
	return max(c.size(t.Value), 0)
}

// drainReprocess is step 1: it puts handed-back tasks in front of the order, in
// their original order, while pending has room for the next one in tasks and in
// bytes, and drops the rest as overflow. The room is asked for whatever becomes of
// the retry (it may expire, or lose to the task pending with its ID), so that the
// rule does not depend on what is pending.
func (c *core[T]) drainReprocess(now time.Time) {
	// Taking from the back and pushing to the front keeps the original order.
	forBudget := false // the budget, not this batcher's bounds, refused the first retry left
	for len(c.reprocess) > 0 {
		last := len(c.reprocess) - 1
		h := c.reprocess[last]
		if c.order.n >= c.maxBuffer || c.bytes+h.size > c.maxBufferBytes {
			break
		}
		if c.overBudget(h.size+c.overhead, now) {
			forBudget = true
			break
		}
		c.reprocess[last] = nil
		c.reprocess = c.reprocess[:last]
		c.requeue(h, now)
	}
	if n := len(c.reprocess); n > 0 {
		for i, h := range c.reprocess {
			c.st.Overflow++
			c.countBudget(forBudget)
			c.drop(h, FateOverflow)
			c.reprocess[i] = nil
		}
		c.reprocess = c.reprocess[:0]
		c.log.note(logOverflow, n, now, nil)
	}
	c.flush()
}

// requeue puts one retry back in front unless it expired or the task pending with
// its ID, which came later, wins: it does unless the retry supersedes it (keeps). Its
// ID is not in flight: it has just come back from flight, an ID is in at most one
// batch, and the driver drains retries before it assigns again.
func (c *core[T]) requeue(h *holder[T], now time.Time) {
	hv, p := c.ids.find(h.task.ID) // if set, it is waiting
	switch {
	case expired(&h.task, now):
		c.st.Expired++
		c.drop(h, FateExpired)
	case p == nil:
		c.ids.insert(hv, h)
		c.wait(h, true)
	case c.keeps(&h.task, &p.task):
		c.retryWins(p, h)
	default:
		c.override(&h.task)
		c.release(h)
	}
}

// retryWins hands pending holder p the retry r, which supersedes p's task, and
// moves p to the front with r's age, where r would have gone: retries go first, in
// their original order, and r's place and age are the older
// claim of the ID, so the task that has waited longest is not sent later for having
// won. p, not r, keeps the slot, so ids is not touched. With a Newer that is a strict
// order this needs a task that came while the ID was neither pending nor in flight,
// between complete and drainReprocess, which the acceptor never lets happen: a task
// parks behind a flight only if the flight does not supersede it.
func (c *core[T]) retryWins(p, r *holder[T]) {
	c.override(&p.task)
	c.unwait(p)
	p.task, p.arrived, p.size = r.task, r.arrived, r.size
	c.wait(p, true)
	c.release(r)
}

// assign is steps 3 and 4 for one worker: it pops the next batch, or reports false
// when no worker is idle, the shaper or the gate holds dispatch, or no batch is
// due. The driver calls it until it reports false.
func (c *core[T]) assign(now time.Time) (*batch[T], bool) {
	// Each round takes or expires at least one holder, so the loop ends.
	defer c.flush()
	for c.idle > 0 && c.hold(now) == 0 && c.due(now) {
		if b := c.popBatch(now); b != nil {
			c.idle--
			return b, true
		}
	}
	return nil, false
}

// hold is how long dispatch must wait: the longer of the shaper and the gate.
func (c *core[T]) hold(now time.Time) time.Duration {
	d := c.shaper.hold(now)
	if c.gate != nil {
		d = max(d, c.gate.Hold(now))
	}
	return d
}

// due reports whether a batch is due: a full batch is ready (batchLimit tasks, or
// batchBytesLimit bytes), or the oldest ready task has waited MaxBatchingDelay (at once when
// the delay is 0), or (ours, when IdleFlush > 0) no task has been accepted for
// IdleFlush: the submissions went quiet, so waiting longer can coalesce nothing more.
func (c *core[T]) due(now time.Time) bool {
	ready := c.order.n - c.parked
	switch {
	case ready == 0:
		return false
	case ready >= c.batchLimit || c.bytes-c.parkedBytes >= c.batchBytesLimit || c.delay <= 0:
		return true
	case c.idleFlush > 0 && now.Sub(c.lastAccept) >= c.idleFlush:
		return true
	}
	return now.Sub(c.firstReady().arrived) >= c.delay
}

// dueAt is when the passing of time alone makes due true, for a core with fewer
// than MaxBatch ready tasks (at least one) and a delay > 0: when the oldest ready
// task has waited MaxBatchingDelay or, if earlier, IdleFlush after the last accept.
func (c *core[T]) dueAt() time.Time {
	at := c.firstReady().arrived.Add(c.delay)
	if c.idleFlush > 0 {
		if quiet := c.lastAccept.Add(c.idleFlush); quiet.Before(at) {
			at = quiet
		}
	}
	return at
}

// firstReady is the oldest holder that is not parked. It walks past at most parked
// holders, which in-flight exclusion bounds by Workers*MaxBatch.
func (c *core[T]) firstReady() *holder[T] {
	h := c.order.head
	for h != nil && h.flying {
		h = h.next
	}
	return h
}

// popBatch takes up to batchLimit ready holders from the head, dropping expired
// ones on the way, and stops at the first that would take the batch past
// batchBytesLimit; the first is always taken. Parked holders keep their place. It
// returns nil if all it found had expired.
func (c *core[T]) popBatch(now time.Time) *batch[T] {
	b := c.newBatch()
	bytes := 0
	for h := c.order.head; h != nil && len(b.tasks) < c.batchLimit; {
		next := h.next
		switch {
		case h.flying:
		case expired(&h.task, now):
			c.expire(h)
		case len(b.tasks) > 0 && bytes+h.size > c.batchBytesLimit:
			next = nil // full in bytes
		default:
			bytes += h.size
			c.take(h, b)
		}
		h = next
	}
	if len(b.tasks) == 0 {
		c.recycleBatch(b)
		return nil
	}
	if c.newer != nil { // only now: take's appends may have moved b.tasks
		for i, h := range b.slots {
			h.sent = &b.tasks[i]
		}
	}
	return b
}

// expire drops h, a waiting holder that is not flying, as expired.
func (c *core[T]) expire(h *holder[T]) {
	c.unwait(h)
	c.st.Expired++
	c.final(&h.task, FateExpired)
	c.forget(h)
}

// take moves h's task from pending into b and marks its ID in flight. h is not
// flying.
func (c *core[T]) take(h *holder[T], b *batch[T]) {
	c.unwait(h)
	b.tasks = append(b.tasks, h.task)
	b.arrived = append(b.arrived, h.arrived)
	b.slots = append(b.slots, h)
	b.sizes = append(b.sizes, h.size)
	h.task, h.arrived, h.size = Task[T]{ID: h.task.ID}, time.Time{}, 0
	h.flying = true
	c.flying++
}

// complete applies a worker's result: it frees the worker and the
// batch's IDs, records fates, queues retries for drainReprocess and arms the shaper.
func (c *core[T]) complete(b *batch[T], now time.Time) {
	c.idle++
	c.heldOK = false // failing and the shaper may change
	for _, h := range b.slots {
		c.land(h)
	}
	r, n := &b.result, len(b.tasks)
	switch {
	case r.Class == Success && len(r.Items) == n:
		c.failing = false
		c.applyItems(b, now)
		c.recover(now)
	case r.Class == TooLarge:
		c.tooLarge(b, now)
	case r.Class == Congestion:
		c.failing = true
		c.st.Congestion += uint64(n)
		c.shaper.congestion(now)
		c.retryAll(b)
	case r.Class == NetworkFailure:
		c.failing = true
		c.st.Transient += uint64(n)
		c.shaper.networkFailure(now)
		c.retryAll(b)
	default: // Permanent, a Success with the wrong number of items, an unknown class
		c.dropAll(b, now)
	}
	if r.Class == NetworkFailure {
		// Not kept: a peer that is down would keep Workers batches of the largest
		// size it was ever sent (~270 KiB with the defaults) for as long as it is
		// down; with hundreds of such peers that is most of a node's memory.
		return
	}
	c.recycleBatch(b)
}

// land ends h's flight: a task waiting in h is unparked, else h is forgotten.
func (c *core[T]) land(h *holder[T]) {
	h.flying, h.sent = false, nil
	c.flying--
	if h.waiting {
		c.parked--
		c.parkedBytes -= h.size
		return
	}
	c.forget(h)
}

// tooLarge applies a TooLarge result (ours): a task refused alone is dropped, since
// no batch can carry it; a batch of several is split: its tasks are handed back, and
// from now on a batch takes at most half its bytes, or, if Size measured it at under
// 2 bytes, half its tasks. Halving bytes, not tasks, learns the peer's limit however
// the sizes mix: one huge task in a batch ends alone and dropped, and the small ones
// around it still go out many at a time. Each split lowers what a batch of several
// tasks can be below what was refused, so a batch the peer keeps refusing ends as
// tasks refused alone: nothing is retried forever. No pause: the peer is not busy.
func (c *core[T]) tooLarge(b *batch[T], now time.Time) {
	if len(b.tasks) == 1 {
		c.st.TooLarge++
		c.final(&b.tasks[0], FateTooLarge)
		c.log.noteTask(logTooLarge, b.tasks[0].ID, now, b.result.Err)
		return
	}
	if bytes := sum(b.sizes); bytes >= 2 {
		c.batchBytesLimit = min(c.batchBytesLimit, bytes/2)
	} else {
		c.batchLimit = min(c.batchLimit, len(b.tasks)/2)
	}
	c.splitAt = now
	c.retryAll(b)
	c.log.note(logSplit, len(b.tasks), now, b.result.Err,
		slog.Int("batch_bytes_limit", c.batchBytesLimit), slog.Int("batch_limit", c.batchLimit))
}

// recover doubles the batch limits back towards MaxBatchBytes and MaxBatch after a
// success, once the last change is splitRecovery old: a peer whose limit was raised
// gets full batches again, and one whose limit stays low refuses about one batch per
// splitRecovery.
func (c *core[T]) recover(now time.Time) {
	if (c.batchBytesLimit < c.maxBatchBytes || c.batchLimit < c.maxBatch) && now.Sub(c.splitAt) >= c.splitRecovery {
		c.batchBytesLimit = min(c.maxBatchBytes, 2*c.batchBytesLimit)
		c.batchLimit = min(c.maxBatch, 2*c.batchLimit)
		c.splitAt = now
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// applyItems applies the per-item outcomes of a successful batch.
func (c *core[T]) applyItems(b *batch[T], now time.Time) {
	busy, invalid := false, 0
	for i, o := range b.result.Items {
		t := &b.tasks[i]
		switch o {
		case ItemOK:
			c.st.Succeeded++
			c.final(t, FateSucceeded)
		case ItemStale:
			c.st.Stale++
			c.final(t, FateStale)
		case ItemBusy:
			c.st.Congestion++
			c.retry(b, i)
			busy = true
		default: // ItemInvalid or an unknown outcome
			c.st.Permanent++
			c.final(t, FatePermanent)
			invalid++
		}
	}
	if busy {
		c.shaper.congestion(now)
	}
	if invalid > 0 {
		c.log.note(logPermanent, invalid, now, b.result.Err)
	}
}

// retryAll hands every task of b back.
func (c *core[T]) retryAll(b *batch[T]) {
	for i := range b.tasks {
		c.retry(b, i)
	}
}

// retry hands b.tasks[i] back to the reprocess queue.
func (c *core[T]) retry(b *batch[T], i int) {
	c.st.Replayed++
	h := c.newHolder(&b.tasks[i], b.arrived[i])
	h.size = b.sizes[i]
	c.reprocess = append(c.reprocess, h)
}

// dropAll drops every task of b as permanent.
func (c *core[T]) dropAll(b *batch[T], now time.Time) {
	for i := range b.tasks {
		c.st.Permanent++
		c.final(&b.tasks[i], FatePermanent)
	}
	kind := logPermanent
	if _, ok := b.result.Err.(*panicError); ok {
		kind = logPanic
	}
	c.log.note(kind, len(b.tasks), now, b.result.Err)
}

// abort ends a batch that was assigned but never sent, at Close.
func (c *core[T]) abort(b *batch[T]) {
	c.idle++
	for i, h := range b.slots {
		c.land(h)
		c.final(&b.tasks[i], FateStopped)
	}
	c.recycleBatch(b)
}

// stopTasks ends the tasks of an Offer that the acceptor never took, at Close.
func (c *core[T]) stopTasks(tasks []Task[T]) {
	c.st.Accepted += uint64(len(tasks))
	for i := range tasks {
		c.final(&tasks[i], FateStopped)
	}
}

// stopAll ends every task still queued or pending, at Close. Batches in flight
// must have been completed or aborted first.
func (c *core[T]) stopAll() {
	for i, h := range c.reprocess {
		c.drop(h, FateStopped)
		c.reprocess[i] = nil
	}
	c.reprocess = c.reprocess[:0]
	for h := c.order.head; h != nil; h = c.order.head {
		c.unwait(h)
		c.final(&h.task, FateStopped)
		c.forget(h)
	}
	c.flush()
}

// nextWake reports when assign may next have work although nothing else happens:
// at the end of a hold, or when a batch becomes due (the oldest ready task has
// waited MaxBatchingDelay, or the submissions have been quiet for IdleFlush,
// whichever comes first). It reports false when only a completion can help (no
// idle worker, or nothing ready).
func (c *core[T]) nextWake(now time.Time) (time.Duration, bool) {
	if c.idle == 0 || c.order.n == c.parked {
		return 0, false
	}
	if d := c.hold(now); d > 0 {
		return d, true
	}
	if c.due(now) {
		return 0, true
	}
	return c.dueAt().Sub(now), true
}

// empty reports whether no task is queued, pending or in flight.
func (c *core[T]) empty() bool {
	return c.order.n == 0 && len(c.reprocess) == 0 && c.flying == 0
}

// stats returns the counters and the gauges the core owns.
func (c *core[T]) stats() Stats {
	s := c.st
	s.ReprocessQueue = uint64(len(c.reprocess))
	s.Pending = uint64(c.order.n)
	s.PendingBytes = uint64(c.bytes)
	s.InFlight = uint64(c.flying)
	s.IdleWorkers = uint64(c.idle)
	return s
}

// wait puts h, already in ids, into pending: at the front (a retry) or the back.
func (c *core[T]) wait(h *holder[T], front bool) {
	h.waiting = true
	c.bytes += h.size
	if h.flying {
		c.parked++
		c.parkedBytes += h.size
	}
	if front {
		c.order.pushFront(h)
	} else {
		c.order.pushBack(h)
	}
}

// unwait takes h out of pending; it stays in ids. Follow with forget unless its
// task goes into flight.
func (c *core[T]) unwait(h *holder[T]) {
	h.waiting = false
	c.bytes -= h.size
	if h.flying {
		c.parked--
		c.parkedBytes -= h.size
	}
	c.order.remove(h)
}

// forget removes h from ids and recycles it, unless a task with its ID is still in
// flight.
func (c *core[T]) forget(h *holder[T]) {
	if h.flying {
		h.task, h.arrived, h.size = Task[T]{ID: h.task.ID}, time.Time{}, 0
		return
	}
	c.ids.remove(h)
	c.release(h)
}

// drop ends h with fate f and recycles it.
func (c *core[T]) drop(h *holder[T], f Fate) {
	c.final(&h.task, f)
	c.release(h)
}

// keeps reports whether earlier survives later, a task with its ID that came after
// it: only if Newer says that earlier supersedes later. Ties, and every meeting
// without Newer, go to the later arrival, the rule from before Newer. earlier may be
// nil when Newer is.
func (c *core[T]) keeps(earlier, later *Task[T]) bool {
	return c.newer != nil && c.newer(earlier, later)
}

// override ends t as the loser of a meeting with another task of its ID.
func (c *core[T]) override(t *Task[T]) {
	c.st.Overridden++
	c.final(t, FateOverridden)
}

// final reports that t has left for good.
func (c *core[T]) final(t *Task[T], f Fate) {
	if c.onFinal != nil {
		c.onFinal(t, f)
	}
}

// newHolder returns a recycled or new holder for a copy of t.
func (c *core[T]) newHolder(t *Task[T], arrived time.Time) *holder[T] {
	h := c.free
	if h != nil {
		c.free, h.next = h.next, nil
	} else {
		h = new(holder[T])
	}
	h.task, h.arrived = *t, arrived
	return h
}

// release recycles h, forgetting its task so the value can be collected.
func (c *core[T]) release(h *holder[T]) {
	*h = holder[T]{next: c.free}
	c.free = h
}

// newBatch returns an empty recycled or new batch.
func (c *core[T]) newBatch() *batch[T] {
	if n := len(c.spare); n > 0 {
		b := c.spare[n-1]
		c.spare = c.spare[:n-1]
		return b
	}
	return &batch[T]{}
}

// recycleBatch empties b, forgetting its tasks, and keeps it for reuse.
func (c *core[T]) recycleBatch(b *batch[T]) {
	clear(b.tasks)
	clear(b.slots)
	b.tasks, b.arrived, b.slots, b.sizes = b.tasks[:0], b.arrived[:0], b.slots[:0], b.sizes[:0]
	b.result = Result{}
	c.spare = append(c.spare, b)
}

// expired reports whether t's Expires has passed at now.
func expired[T any](t *Task[T], now time.Time) bool {
	return !t.Expires.IsZero() && !t.Expires.After(now)
}
