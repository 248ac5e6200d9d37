package fanout

import (
	"hash/maphash"
	"sync"
	"unsafe"
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

// versionShard is one lock's worth of the table: a map plus an intrusive recency list,
// most recent first. Invariant: n == number of list nodes == number of nodes reachable
// from byHash <= max.
//
// The map is keyed by the task_id's 64-bit hash (the one that also picks the shard), not
// by the string: one hash per admit instead of two, and 16-byte map slots with integer
// compares instead of string ones. Nodes whose task_ids share a hash are chained through
// same; the node's taskID decides. Each admit is one map lookup, plus one insert for a
// new task_id (BenchmarkVersionTableGrow and Churn in docs/BENCHMARKS.md).
//
// When full, the least recent node is recycled for the new task_id, so an origin that
// takes unique task_ids all day allocates nothing here once the table is full
// (hashicorp/golang-lru, used before, allocated an entry per new key).
type versionShard struct {
	mu         sync.Mutex
	max        int                     // immutable
	n          int                     // guarded by mu: nodes in the shard
	byHash     map[uint64]*versionNode // guarded by mu: the first node of each hash's chain
	head, tail *versionNode            // guarded by mu; head is the most recent
}

type versionNode struct {
	taskID     string
	hash       uint64
	s          stamp
	prev, next *versionNode // recency list
	same       *versionNode // next node with the same hash (almost always nil)
}

func newVersionTable(capacity int) *versionTable {
	per := max(1, capacity/versionShards)
	t := &versionTable{seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].max = per
		t.shards[i].byHash = make(map[uint64]*versionNode)
	}
	return t
}

// find returns the node of taskID, or nil. Caller holds mu. The comparison does not
// allocate.
func (sh *versionShard) find(h uint64, taskID []byte) *versionNode {
	for n := sh.byHash[h]; n != nil; n = n.same {
		if n.taskID == string(taskID) {
			return n
		}
	}
	return nil
}

// store sets s on n, or on a new node for taskID when n is nil (evicting the least
// recent task_id when the shard is full), and makes it the most recent. Caller holds mu.
func (sh *versionShard) store(n *versionNode, h uint64, taskID string, s stamp) {
	switch {
	case n != nil:
		sh.unlink(n)
	case sh.n >= sh.max:
		n = sh.tail // evict the least recent and reuse its node
		sh.unlink(n)
		sh.unchain(n)
		n.taskID, n.hash = taskID, h
		sh.chain(n)
	default:
		n = &versionNode{taskID: taskID, hash: h}
		sh.chain(n)
		sh.n++
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

// chain puts n first in its hash's chain.
func (sh *versionShard) chain(n *versionNode) {
	n.same = sh.byHash[n.hash]
	sh.byHash[n.hash] = n
}

// unchain takes n out of its hash's chain.
func (sh *versionShard) unchain(n *versionNode) {
	first := sh.byHash[n.hash]
	switch {
	case first == n && n.same == nil:
		delete(sh.byHash, n.hash)
	case first == n:
		sh.byHash[n.hash] = n.same
	default:
		p := first
		for p.same != n {
			p = p.same
		}
		p.same = n.same
	}
	n.same = nil
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

// locate hashes taskID once: the hash picks the shard and keys its map.
func (t *versionTable) locate(taskID []byte) (*versionShard, uint64) {
	h := maphash.Bytes(t.seed, taskID)
	return &t.shards[h%versionShards], h
}

// bytesOf is a read-only view of s's bytes, for the lookups that take bytes.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// record stores s for taskID if it is newer than what the table holds. It is how the
// origin remembers its own submissions.
func (t *versionTable) record(taskID string, s stamp) {
	sh, h := t.locate(bytesOf(taskID))
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.find(h, bytesOf(taskID)); n == nil || s.newerThan(n.s) {
		sh.store(n, h, taskID, s)
	}
}

// admitResult is the outcome of admit.
type admitResult int

const (
	admitted admitResult = iota // newer, and put accepted it
	stale                       // not newer than the table
	busy                        // newer, but put refused it (inbox full)
)

// admit decides a replicated event whose task_id is still in the request's bytes: if
// s is newer than the table, it calls put, and records s only if put accepted. put
// returns the task_id as a string the table may keep (it is only used for a task_id the
// table does not hold yet). The check and the record happen under one lock, so two
// origins racing on the same task_id are ordered, and a BUSY event leaves the table
// untouched (its retry is not mistaken for a duplicate).
func (t *versionTable) admit(taskID []byte, s stamp, put func() (key string, ok bool)) admitResult {
	sh, h := t.locate(taskID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := sh.find(h, taskID)
	if n != nil && !s.newerThan(n.s) {
		return stale
	}
	key, ok := put()
	if !ok {
		return busy
	}
	sh.store(n, h, key, s)
	return admitted
}
