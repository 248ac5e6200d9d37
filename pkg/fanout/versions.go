package fanout

import (
	"hash/maphash"
	"sync"
)

// versionShards spreads the version table over independently locked shards so that
// Submit and Replicate handlers on different task_ids rarely contend.
const versionShards = 64

// stamp is a version with the node that wrote it. Stamps order lexicographically by
// (version, origin): the last-writer-wins rule of SPEC §6.
type stamp struct {
	version uint64
	origin  string
}

// newerThan reports whether s wins over o.
func (s stamp) newerThan(o stamp) bool {
	return s.version > o.version || (s.version == o.version && s.origin > o.origin)
}

// versionTable remembers the highest stamp seen per task_id, bounded by evicting the
// least recently used task_ids. Every node keeps one; it is what makes retried batches,
// duplicates and reordered events STALE instead of delivered twice or backwards.
type versionTable struct {
	seed   maphash.Seed
	shards [versionShards]versionShard
}

// versionShard is one lock's worth of the table: a map plus an intrusive
// recency list, most recent first. Invariant: len(byID) == number of list nodes <= max.
// When full, the least recent node is recycled for the new task_id, so an origin that
// takes unique task_ids all day allocates nothing here once the table is full
// (hashicorp/golang-lru, used before, allocated an entry per new key:
// BenchmarkVersionTableChurn in docs/BENCHMARKS.md).
type versionShard struct {
	mu         sync.Mutex
	max        int                     // immutable
	byID       map[string]*versionNode // guarded by mu
	head, tail *versionNode            // guarded by mu; head is the most recent
}

type versionNode struct {
	taskID     string
	s          stamp
	prev, next *versionNode
}

func newVersionTable(capacity int) *versionTable {
	per := max(1, capacity/versionShards)
	t := &versionTable{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].max = per
		t.shards[i].byID = make(map[string]*versionNode)
	}
	return t
}

// peek returns the stamp of taskID without touching recency. Caller holds mu.
func (sh *versionShard) peek(taskID string) (stamp, bool) {
	if n, ok := sh.byID[taskID]; ok {
		return n.s, true
	}
	return stamp{}, false
}

// set stores s for taskID and makes it the most recent. Caller holds mu.
func (sh *versionShard) set(taskID string, s stamp) {
	n, ok := sh.byID[taskID]
	switch {
	case ok:
		sh.unlink(n)
	case len(sh.byID) >= sh.max:
		n = sh.tail // evict the least recent and reuse its node
		sh.unlink(n)
		delete(sh.byID, n.taskID)
		n.taskID = taskID
		sh.byID[taskID] = n
	default:
		n = &versionNode{taskID: taskID}
		sh.byID[taskID] = n
	}
	n.s = s
	n.next, n.prev = sh.head, nil
	if sh.head != nil {
		sh.head.prev = n
	} else {
		sh.tail = n
	}
	sh.head = n
}

func (sh *versionShard) unlink(n *versionNode) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		sh.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		sh.tail = n.prev
	}
	n.prev, n.next = nil, nil
}

func (t *versionTable) shard(taskID string) *versionShard {
	return &t.shards[maphash.String(t.seed, taskID)%versionShards]
}

// record stores s for taskID if it is newer than what the table holds. It is how the
// origin remembers its own submissions.
func (t *versionTable) record(taskID string, s stamp) {
	sh := t.shard(taskID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur, ok := sh.peek(taskID); !ok || s.newerThan(cur) {
		sh.set(taskID, s)
	}
}

// admitResult is the outcome of admit.
type admitResult int

const (
	admitted admitResult = iota // newer, and put accepted it
	stale                       // not newer than the table
	busy                        // newer, but put refused it (inbox full)
)

// admit decides a replicated event: if s is newer than the table, it calls put, and
// records s only if put accepted. The check and the record happen under one lock, so
// two origins racing on the same task_id are ordered, and a BUSY event leaves the
// table untouched (its retry is not mistaken for a duplicate).
func (t *versionTable) admit(taskID string, s stamp, put func() bool) admitResult {
	sh := t.shard(taskID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if cur, ok := sh.peek(taskID); ok && !s.newerThan(cur) {
		return stale
	}
	if !put() {
		return busy
	}
	sh.set(taskID, s)
	return admitted
}
