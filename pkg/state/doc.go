// Package state is a node's state table: the latest event of every task_id, own
// writes and replicated ones alike, by last-writer-wins on (version, origin), each
// change numbered by a node-local, rising revision.
//
// # Life of a write
//
// Put hashes the key and finds its entry. A write that is not newer than the entry
// is Stale and changes nothing. A write that would take the table past its bounds
// (below) is Full and changes nothing. Otherwise the table takes the next revision
// and:
//
//   - copies the event's bytes into the arena (arena.go), a set of 1 MiB append-only
//     slabs; the entry's old record is now dead, a slab with nothing live is
//     dropped, and once the slabs hold more dead bytes than half their live ones
//     the least live slab is compacted into the current slab and dropped;
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
// TombstoneTTL (or until MaxTombstones needs their room, see Bounds) so that
// watchers and peers learn of them and an older write cannot bring the key back;
// once one is collected, a live scan from before it could miss the deletion, so
// Next and CheckResume refuse it with ErrCompacted.
//
// # Bounds
//
// The live keys (not deleted) and the tombstones are bounded apart, each in keys
// and in bytes: MaxKeys and MaxBytes, MaxTombstones and MaxTombstoneBytes. So a
// delete makes room at once: the key leaves the live bounds and its tombstone goes
// to its own. Writing a deleted key again is a new key for MaxKeys.
//
// A tombstone never waits for room: at MaxTombstones or MaxTombstoneBytes the
// oldest tombstones (by their age at the origin, then by revision) are collected
// first, before their TombstoneTTL, and counted (Stats.CollectedEarly; one that is
// due anyway counts as Collected). The price of collecting one early is the price of
// collecting any: a peer that missed the delete, and still holds the key, can bring
// it back. Only a tombstone bigger than MaxTombstoneBytes is Full.
//
// A write is the node's own (Write.Own: its app's Submit, or its own disk at start)
// or a peer's (replicated by its origin, or brought by anti-entropy from any peer).
// OwnReservePercent of MaxKeys and of MaxBytes is kept for the node's own writes: a
// peer's write adds a key only while the live keys are below MaxKeys less that
// share, and grows the bytes only within MaxBytes less that share; the node's own
// writes go on to the bounds. So a flood that peers replicate or relay fills a
// table only to the reserve, and the node's app still writes new keys while it
// lasts; the refused peer writes are counted (Stats.RefusedPeer) and their senders
// retry them, as at any bound. A peer's write that does not grow the bytes (an
// update of a key held, no bigger; a delete) is never refused for the reserve.
//
// With the defaults (a million keys and 512 MiB live, a million tombstones and
// 128 MiB, 10 % reserved), a node's app keeps 100,000 keys and 51 MiB to itself.
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
// or of two thirds of a slab.
package state
