package batcher

import "time"

// holder is one task_id's slot in the core: the task waiting in pending, the mark
// that a task with this ID is in flight, or both (one in process, at most one
// waiting). A holder in the reprocess queue is neither, until drainReprocess puts it
// in pending. Holders are recycled through core.free, so steady traffic allocates
// none.
type holder[T any] struct {
	// task is the waiting task. While the holder is only in flight, just task.ID is
	// kept (the sent task lives in the batch) so the payload can be collected.
	task Task[T]
	// size is task's size (Config.Size) while the holder waits (its part of
	// core.bytes) or is in the reprocess queue; 0 while it only flies.
	size int
	// arrived is when this task_id's slot entered pending. An override keeps it (the
	// slot keeps its place, so it keeps its age too) and a retry keeps it (one that
	// supersedes the pending task brings its own, the older), so a hot task_id can
	// never hold back a batch that MaxBatchingDelay says is due.
	arrived time.Time
	// sent, while flying and only if Config.Newer is set, points at the task in
	// flight: its element of the batch's tasks, which holds it until the batch
	// completes. acceptOne compares an arrival with it. task cannot hold it: while
	// parked, task is the waiting one, and a parked task can be evicted while its ID
	// still flies, after which an arrival must again be compared with the flight. A
	// pointer into the batch keeps no second copy of the payload and allocates
	// nothing. Invariant: sent != nil iff flying && Newer != nil; sent.ID == task.ID.
	sent *Task[T]
	// prev and next link the holder into core.order; both nil when it is not in it.
	// next also links core.free.
	prev, next *holder[T]
	// waiting: the holder is in pending (core.order). flying: a task with this ID is
	// in flight. Invariant: core.ids holds the holder under task.ID iff waiting ||
	// flying. A holder that is both is parked: assign skips it and it keeps its place.
	waiting, flying bool
	// hash is task.ID's hash in core.ids, set by idIndex.insert; meaningless while
	// the holder is not in it.
	hash uint64
}

// order is the processing order of pending: an intrusive doubly linked list,
// oldest at the head, so coalescing keeps a place and removal is O(1).
// Invariant: n == number of holders linked from head.
type order[T any] struct {
	head, tail *holder[T]
	n          int
}

// pushBack appends h, the newest task.
func (o *order[T]) pushBack(h *holder[T]) {
	h.prev, h.next = o.tail, nil
	if o.tail != nil {
		o.tail.next = h
	} else {
		o.head = h
	}
	o.tail = h
	o.n++
}

// pushFront puts h before everything else, as a retry goes.
func (o *order[T]) pushFront(h *holder[T]) {
	h.prev, h.next = nil, o.head
	if o.head != nil {
		o.head.prev = h
	} else {
		o.tail = h
	}
	o.head = h
	o.n++
}

// remove unlinks h, which must be in o.
func (o *order[T]) remove(h *holder[T]) {
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		o.head = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else {
		o.tail = h.prev
	}
	h.prev, h.next = nil, nil
	o.n--
}
