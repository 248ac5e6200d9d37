package fanout

import (
	"hash/maphash"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
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

type versionShard struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, stamp] // guarded by mu
}

func newVersionTable(capacity int) *versionTable {
	per := max(1, capacity/versionShards)
	t := &versionTable{seed: maphash.MakeSeed()}
	for i := range t.shards {
		lru, err := simplelru.NewLRU[string, stamp](per, nil)
		if err != nil {
			panic(err) // only for per <= 0, which max() rules out
		}
		t.shards[i].lru = lru
	}
	return t
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
	if cur, ok := sh.lru.Get(taskID); !ok || s.newerThan(cur) {
		sh.lru.Add(taskID, s)
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
	if cur, ok := sh.lru.Peek(taskID); ok && !s.newerThan(cur) {
		return stale
	}
	if !put() {
		return busy
	}
	sh.lru.Add(taskID, s)
	return admitted
}

// get returns the stamp held for taskID.
func (t *versionTable) get(taskID string) (stamp, bool) {
	sh := t.shard(taskID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.lru.Peek(taskID)
}
