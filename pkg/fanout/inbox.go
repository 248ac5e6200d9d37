package fanout

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
)

// delivery is one replicated event waiting for, or on its way to, subscribers: the
// Event's bytes as its origin encoded them (wire.go), and what the node reads of them.
type delivery struct {
	raw       []byte // the fanout.v1.Event message; never written after admission
	taskID    string // shares raw's memory
	version   uint64
	origin    string
	submitted int64 // unix nanos at the origin
	shared    bool  // handed to more than one subscriber: losing one copy loses nothing
}

// inboxNode is an intrusive list node: the inbox keeps FIFO order and O(1) replace.
type inboxNode struct {
	d          delivery
	prev, next *inboxNode
}

// inbox holds replicated events between Replicate and the Subscribe streams. It is
// bounded and keeps only the latest event per task_id, like a batcher's pending: a
// newer event replaces an older one that is still waiting, in its place. When it is
// full, put refuses new task_ids, and Replicate answers BUSY so the sender backs off:
// a slow local app pushes back on the senders instead of losing events.
//
// One pump goroutine (run) moves events from the queue to every subscriber whose
// prefix matches, in queue order. With no subscriber connected, events wait.
type inbox struct {
	capacity int

	mu      sync.Mutex
	byID    map[string]*inboxNode // guarded by mu; len(byID) <= capacity
	head    *inboxNode            // guarded by mu; oldest
	tail    *inboxNode            // guarded by mu; newest
	free    *inboxNode            // guarded by mu; popped nodes for reuse, linked by next
	nfree   int                   // guarded by mu; len(free) <= capacity
	subs    map[*subscriber]struct{}
	gone    []*subscriber // guarded by mu: unsubscribed, their buffers not yet reclaimed
	wake    chan struct{} // capacity 1: something to do for the pump
	popBuf  []delivery    // owned by the pump
	subBuf  []*subscriber // owned by the pump: the subscriber snapshot of the last pop
	deliver atomic.Uint64 // events handed to subscriber streams
	size    atomic.Int64  // mirror of len(byID) for lock-free Status
	nsubs   atomic.Int64
}

// subscriber is one open Subscribe stream.
type subscriber struct {
	prefix string
	ch     chan delivery // bounded; the pump blocks on a slow subscriber
	done   <-chan struct{}
	unsent []delivery // set by the stream's cancel: taken from ch but not sent
}

// subscriberBuffer is how many events may sit between the pump and one stream. Small:
// backpressure should reach the inbox (and so the senders) quickly.
const subscriberBuffer = 256

// popBatch is how many events the pump takes per lock acquisition.
const popBatch = 128

func newInbox(capacity int) *inbox {
	return &inbox{
		capacity: capacity,
		byID:     make(map[string]*inboxNode),
		subs:     make(map[*subscriber]struct{}),
		wake:     make(chan struct{}, 1),
	}
}

// put queues d. It replaces a waiting event with the same task_id in place, and
// refuses a new task_id when the inbox is full.
func (in *inbox) put(d delivery) bool {
	in.mu.Lock()
	if n, ok := in.byID[d.taskID]; ok {
		n.d = d
		in.mu.Unlock()
		return true
	}
	if len(in.byID) >= in.capacity {
		in.mu.Unlock()
		return false
	}
	n := in.node(d)
	n.prev = in.tail
	if in.tail != nil {
		in.tail.next = n
	} else {
		in.head = n
	}
	in.tail = n
	in.byID[d.taskID] = n
	in.size.Store(int64(len(in.byID)))
	in.mu.Unlock()
	in.signal()
	return true
}

// node returns a cleared list node holding d: a recycled one if any. A node per event
// was a tenth of a saturated receiver's allocations. Called with mu held.
func (in *inbox) node(d delivery) *inboxNode {
	n := in.free
	if n == nil {
		return &inboxNode{d: d}
	}
	in.free, in.nfree = n.next, in.nfree-1
	n.next, n.d = nil, d
	return n
}

// recycle keeps a popped node for reuse, at most capacity of them, with its references
// cleared for the GC. Called with mu held.
func (in *inbox) recycle(n *inboxNode) {
	if in.nfree >= in.capacity {
		return
	}
	*n = inboxNode{next: in.free}
	in.free, in.nfree = n, in.nfree+1
}

func (in *inbox) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// subscribe registers a stream. The returned cancel unregisters it; the stream passes
// any event it took from its channel but could not send. What the stream did not send
// goes back to the inbox (see reclaim).
func (in *inbox) subscribe(prefix string, done <-chan struct{}) (*subscriber, func(unsent ...delivery)) {
	s := &subscriber{prefix: prefix, ch: make(chan delivery, subscriberBuffer), done: done}
	in.mu.Lock()
	in.subs[s] = struct{}{}
	in.nsubs.Store(int64(len(in.subs)))
	in.mu.Unlock()
	in.signal()
	return s, func(unsent ...delivery) {
		in.mu.Lock()
		delete(in.subs, s)
		s.unsent = unsent
		in.gone = append(in.gone, s)
		in.nsubs.Store(int64(len(in.subs)))
		in.mu.Unlock()
		in.signal()
	}
}

// reclaim runs on the pump: for each stream that went away, the events it still held
// (its unsent one, then its channel, in order) go back to the head of the inbox, so the
// next subscriber gets them. Events another stream also received are not put back, nor
// are those whose task has a newer event waiting. The pump is the only writer of a
// subscriber's channel and its reader has returned, so draining it here is safe.
func (in *inbox) reclaim() {
	in.mu.Lock()
	gone := in.gone
	in.gone = nil
	in.mu.Unlock()
	for _, s := range gone {
		lost := s.unsent
		for drained := false; !drained; {
			select {
			case d := <-s.ch:
				lost = append(lost, d)
			default:
				drained = true
			}
		}
		in.requeue(lost)
	}
}

// requeue puts ds back at the head of the queue, in order, skipping shared events and
// tasks that already have a newer event waiting. It may take the inbox past capacity by
// at most one subscriber's buffer: those events were already admitted once.
func (in *inbox) requeue(ds []delivery) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i := len(ds) - 1; i >= 0; i-- {
		d := ds[i]
		if _, newer := in.byID[d.taskID]; newer || d.shared {
			continue
		}
		d.shared = false
		n := in.node(d)
		n.next = in.head
		if in.head != nil {
			in.head.prev = n
		} else {
			in.tail = n
		}
		in.head = n
		in.byID[d.taskID] = n
	}
	in.size.Store(int64(len(in.byID)))
}

// pop takes up to popBatch events from the head, and a snapshot of the subscribers.
// It takes nothing while nobody is subscribed, so events wait for the next subscriber.
func (in *inbox) pop() ([]delivery, []*subscriber) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.subs) == 0 || in.head == nil {
		return nil, nil
	}
	out := in.popBuf[:0]
	for in.head != nil && len(out) < popBatch {
		n := in.head
		in.head = n.next
		delete(in.byID, n.d.taskID)
		out = append(out, n.d)
		in.recycle(n)
	}
	if in.head == nil {
		in.tail = nil
	} else {
		in.head.prev = nil
	}
	in.size.Store(int64(len(in.byID)))
	subs := in.subBuf[:0]
	for s := range in.subs {
		subs = append(subs, s)
	}
	in.popBuf, in.subBuf = out, subs
	return out, subs
}

// run is the pump. It returns when ctx is done.
func (in *inbox) run(ctx context.Context) {
	var orphans []delivery // popped, matched a stream, but reached none (all went away)
	for {
		in.reclaim()
		batch, subs := in.pop()
		if len(batch) == 0 {
			select {
			case <-in.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		orphans = orphans[:0]
		for _, d := range batch {
			reached, ok := in.fanOut(ctx, d, subs)
			if !ok {
				return
			}
			if !reached {
				orphans = append(orphans, d)
			}
		}
		in.requeue(orphans)
		clear(batch) // drop references for the GC, including departed streams
		clear(subs)
	}
}

// fanOut hands d to every stream of subs whose prefix matches. reached is false when
// some stream matched but none took it (each had gone away); ok is false when ctx ended.
func (in *inbox) fanOut(ctx context.Context, d delivery, subs []*subscriber) (reached, ok bool) {
	matched := 0
	for _, s := range subs {
		if strings.HasPrefix(d.taskID, s.prefix) {
			matched++
		}
	}
	d.shared = matched > 1
	took := 0
	for _, s := range subs {
		if !strings.HasPrefix(d.taskID, s.prefix) {
			continue
		}
		select {
		case s.ch <- d:
			took++
		case <-s.done: // stream went away; its cancel reclaims its buffer
		case <-ctx.Done():
			return false, false
		}
	}
	return matched == 0 || took > 0, true
}

func (in *inbox) len() int         { return int(in.size.Load()) }
func (in *inbox) subscribers() int { return int(in.nsubs.Load()) }
