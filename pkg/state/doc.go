// Package state is a node's state table: the latest event of every task_id, own
// writes and replicated ones alike, by last-writer-wins on (version, origin), each
// change numbered by a node-local, rising revision.
//
// # Life of a write
//
// Put hashes the key and finds its entry. A write that is not newer than the entry
// is Stale and changes nothing. A write that would take the table past MaxKeys or
// MaxBytes first makes the table collect the tombstones older than TombstoneTTL; if
// that frees nothing, it is Full and changes nothing. Otherwise the table takes the
// next revision and:
//
//   - copies the event's bytes into the arena (arena.go), a set of 1 MiB append-only
//     slabs; the entry's old record is now dead, and a slab less than half live is
//     compacted into the current slab and dropped;
//   - appends (revision, entry) to the revision log (revlog.go); the entry's old slot
//     is now dead, because its revision no longer matches the entry's;
//   - wakes the readers waiting in Changed.
//
// # Readers
//
// A watcher holds a revision, not a queue. Next reads the entries changed after it
// from the revision log, in revision order, a bounded step at a time, and advances
// it. Because the log holds each key once, at its latest change, a reader that falls
// behind reads the latest state of each key, not its history: it is coalesced per
// key for free, costs no memory while it is away, and never slows a writer or another
// reader. Entries alias the arena, whose bytes are never written again, so readers
// encode them after the lock is released.
//
// A snapshot is a scan up to the revision it started at, without deletions; the
// changes after that revision follow as a live scan. A resume is a live scan from the
// client's last revision. Deletions are tombstones (Deleted entries), kept for
// TombstoneTTL so that watchers and peers learn of them and an older write cannot
// bring the key back; once one is collected, a live scan from before it could miss
// the deletion, so Next and CheckResume refuse it with ErrCompacted.
//
// # Memory
//
// An entry is a 56-byte struct without pointers in 4096-entry pages, its origin an
// interned id (origins.go); the index (index.go) is open addressing over two
// pointer-free arrays of entry numbers and key hashes. So a million keys are a few
// thousand objects for the garbage collector. docs/BENCHMARKS.md has the figures.
//
// One mutex guards the table. Every call holds it for a bounded step: one write, one
// read, one scan step of at most 4096 log slots, one compaction of a 1024-slot chunk
// or of half a slab.
package state
