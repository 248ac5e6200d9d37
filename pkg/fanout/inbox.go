package fanout

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// delivery is one replicated event waiting for, or on its way to, subscribers.
type delivery struct {
	event     *fanoutv1.Event
	origin    string
	submitted int64 // unix nanos at the origin
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
	subs    map[*subscriber]struct{}
	wake    chan struct{} // capacity 1: something to do for the pump
	popBuf  []delivery    // owned by the pump
	deliver atomic.Uint64 // events handed to subscriber streams
	size    atomic.Int64  // mirror of len(byID) for lock-free Status
	nsubs   atomic.Int64
}

// subscriber is one open Subscribe stream.
type subscriber struct {
	prefix string
	ch     chan delivery // bounded; the pump blocks on a slow subscriber
	done   <-chan struct{}
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
	if n, ok := in.byID[d.event.GetTaskId()]; ok {
		n.d = d
		in.mu.Unlock()
		return true
	}
	if len(in.byID) >= in.capacity {
		in.mu.Unlock()
		return false
	}
	n := &inboxNode{d: d, prev: in.tail}
	if in.tail != nil {
		in.tail.next = n
	} else {
		in.head = n
	}
	in.tail = n
	in.byID[d.event.GetTaskId()] = n
	in.size.Store(int64(len(in.byID)))
	in.mu.Unlock()
	in.signal()
	return true
}

func (in *inbox) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// subscribe registers a stream; the returned function unregisters it.
func (in *inbox) subscribe(prefix string, done <-chan struct{}) (*subscriber, func()) {
	s := &subscriber{prefix: prefix, ch: make(chan delivery, subscriberBuffer), done: done}
	in.mu.Lock()
	in.subs[s] = struct{}{}
	in.nsubs.Store(int64(len(in.subs)))
	in.mu.Unlock()
	in.signal()
	return s, func() {
		in.mu.Lock()
		delete(in.subs, s)
		in.nsubs.Store(int64(len(in.subs)))
		in.mu.Unlock()
	}
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
		delete(in.byID, n.d.event.GetTaskId())
		out = append(out, n.d)
	}
	if in.head == nil {
		in.tail = nil
	} else {
		in.head.prev = nil
	}
	in.size.Store(int64(len(in.byID)))
	subs := make([]*subscriber, 0, len(in.subs))
	for s := range in.subs {
		subs = append(subs, s)
	}
	in.popBuf = out
	return out, subs
}

// run is the pump. It returns when ctx is done.
func (in *inbox) run(ctx context.Context) {
	for {
		batch, subs := in.pop()
		if len(batch) == 0 {
			select {
			case <-in.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		for _, d := range batch {
			for _, s := range subs {
				if !strings.HasPrefix(d.event.GetTaskId(), s.prefix) {
					continue
				}
				select {
				case s.ch <- d:
				case <-s.done: // stream went away; skip it
				case <-ctx.Done():
					return
				}
			}
		}
		clear(batch) // drop references for the GC
	}
}

func (in *inbox) len() int         { return int(in.size.Load()) }
func (in *inbox) subscribers() int { return int(in.nsubs.Load()) }
