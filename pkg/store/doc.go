// Package store keeps a node's state on its own disk, for --data-dir: the
// latest record of every task_id (tombstones too), the node id, and the clock's
// high-water mark, so that a node killed with kill -9 comes back with what it
// acknowledged and never writes a version below one it wrote before.
//
// It is a thin layer over cockroachdb/pebble, an LSM tree with a write-ahead log
// (WAL), chosen over etcd-io/bbolt by the benchmark in docs/BENCHMARKS.md ("The
// embedded store for --data-dir"): on this workload, many small overwrites committed
// durably by concurrent writers, pebble took 2.8× the records/s of bbolt with one
// writer and one record a commit, and 2.6–4.8× in every other phase, on a quarter of
// the disk and under half the peak RSS. bbolt scans 5–8× faster and reopens in a
// quarter of the time; a node scans the store only at Open, once.
//
// # Life of a store
//
// The sidecar calls Open(dir) once at start. Open takes dir's lock (fanout.lock),
// checks the on-disk layout, and reads the node id and the clock. The node then
// calls Load to rebuild its state table from the records, in key order, and
// SetNodeID the first time it starts on an empty dir. From then on every change the
// state table accepts goes to Commit, and an acknowledgement of QUEUED waits for it:
// Commit returns when the change is on disk. Close at shutdown, after the last
// Commit, needs to flush nothing (the WAL already has everything) and releases the
// lock.
//
// The store does not decide anything: last-writer-wins, tombstone collection and the
// bounds of the state table are the state table's (pkg/state). Commit writes what it
// is given; a key put twice in one Commit keeps the later record.
//
// # On disk
//
// One pebble database in dir, plus fanout.lock. pebble's keys are a one-byte prefix
// and a name:
//
//	'k' + task_id      a record: its value below (0..MaxKeyBytes bytes of task_id)
//	"mlayout"          the layout of this dir: one byte, 1
//	"mnode"            the node id, as given to SetNodeID (absent until then)
//	"mclock"           the clock's high-water mark: 8 bytes, big-endian
//	"mtransport"       the transport's position, opaque here (absent until saved)
//
// A record's value (value.go) is a format byte (1), a flags byte (bit 0: deleted),
// the version and the origin's submitted time (8 bytes each, big-endian), the
// origin's length (2 bytes) and bytes, then the encoded fanout.v1.Event as received.
// Every field has a fixed place or an explicit length, so a value has exactly one
// encoding, and anything else fails to decode (Load names the key) instead of being
// misread. A value of another format, or a dir of another layout (Open refuses it,
// naming the dir), is from a sidecar that this one is older than: the format and
// layout bytes exist so that a later change can be read, or refused, rather than
// misread.
//
// "mclock" is kept with pebble merge operands (clock.go): each Commit that raises
// the mark adds its highest version as an operand in the same batch as its records,
// and pebble folds the operands into their maximum. So the mark is saved atomically
// with the records it covers, and concurrent Commits that land in any order leave
// the maximum, which a plain Set would not. The merge operator's name is saved by
// pebble in the dir; pebble refuses to open the dir with another. RaiseClock adds an
// operand on its own, fsynced: the node leases versions ahead of use with it (about
// once a second), so that the mark covers versions it handed out but never committed.
//
// # Durability: the fsync policy, and what it costs
//
// Every Commit is one pebble batch committed with pebble.Sync: the batch is appended
// to the WAL and Commit returns after an fdatasync of the WAL has covered it. After
// a crash, pebble replays the WAL: a batch is there whole or not at all, and a torn
// tail (a batch that was being written) is dropped; it was never acknowledged.
// Memtable flushes and compactions write sstables in the background and sync them
// before the WAL that they replace is recycled.
//
// Concurrent Commits share syncs: pebble's commit pipeline appends each batch to the
// WAL as it comes, and one sync covers every batch appended before it started; the
// batches that arrive while it runs wait for the next one. That is the group commit:
// no timer, no batching delay. A lone Commit pays one fdatasync; N Commits at once
// pay far fewer than N (Stats.Syncs against Stats.Commits says how many).
//
// What it costs, on the project's VM (ext4 on a virtio disk, the medians of six
// benchmark runs): an fdatasync of a 4 KiB overwrite takes 53–79 µs at the median,
// and a durable Commit of one record by one writer took 56 µs at the median and
// 152 µs at p99, ~14,400 commits/s: a lone Commit costs about one fdatasync. 8
// writers shared each sync about three ways and reached ~48,000 records/s; commits of
// 100 records, ~130,000 records/s. A disk whose fdatasync costs milliseconds (network
// block storage often does) divides the lone writer's figures by that much, and
// group commit matters more. The OS's fdatasync is trusted: a disk cache that
// acknowledges writes before they are stable defeats it on power loss, though not
// on a process crash.
//
// SetNodeID and a new dir's layout are also written with pebble.Sync. Nothing else
// is: Close relies on the WAL.
//
// # Disk faults: a free-space floor, and a reopen after a fatal error
//
// pebble treats a failed write of its log as fatal to its commit pipeline (DB.Apply
// calls Logger.Fatalf: "there isn't much we can do on an error here"), and so a
// failed MANIFEST write; it expects Fatalf not to return. Two ways keep a full disk
// from stopping the node: refuse commits before pebble sees ENOSPC, or reopen pebble
// in the process after the fault. The store does the first, and keeps the second for
// what the first cannot prevent:
//
//   - The floor. Every write (Commit, RaiseClock, SetNodeID) first reads the file
//     system's free space (statfs(2): 1.1–2.3 µs on ext4 here, BenchmarkFreeSpace,
//     beside a ~60 µs fdatasync) and, below Config.MinFreeBytes
//     (--data-dir-min-free-bytes, 64 MiB by default), writes nothing and returns
//     ErrDiskFull, which says how much is free and what the floor is. pebble never
//     sees the fault: no failed batch, no horked pipeline, nothing to recover, and
//     the first write that finds room again succeeds. The node retries a failed
//     commit every second, and is not ready meanwhile ("disk full: …"). The floor
//     covers what pebble may still write after the last commit it was given: that
//     commit (the node commits at most 8 MiB at once), a memtable flush (4 MiB),
//     compactions, and a new MANIFEST. A reopen alone would not do: after a fault
//     each retry is a Fatalf, a Close and an Open replaying the log, and pebble's
//     own background writes (flushes, compactions, the MANIFEST) fail in the
//     meantime on a disk with no room at all.
//   - Read-only at Open. pebble writes at Open (a new log and MANIFEST), so a store
//     opened below the floor is opened read-only: the node loads its state and serves
//     it, and the first write that finds room closes it and opens it read-write. A new
//     store cannot be read-only; Open on a full disk fails then, saying so.
//   - The reopen. What the floor cannot prevent (EIO, or ENOSPC from another writer
//     filling the disk faster than the floor's margin) still reaches Fatalf on the
//     committing goroutine. pebbleLogger.Fatalf panics with a value of its own that
//     the store call recovers (guard): the call returns ErrFailed, and no later write
//     goes to the broken DB. The next write reopens it (Close returns the error and
//     releases the files; Open replays the log, which holds every batch that was
//     acknowledged), when no other call is in flight and the disk has at least the
//     floor and 16 MiB free (pebble's Open flushes the memtable it recovers, and on a
//     disk with no room that flush is retried at once, without end: Open would not
//     return); until then writes return ErrFailed, with ErrDiskFull when that is
//     why. The e2e test TestDiskFullNoFloor turns the floor off and fills the disk
//     under load: pebble meets ENOSPC in its log, the process goes on, and every
//     acknowledged event is on disk after the room is back. A Fatalf on one of pebble's own goroutines (a MANIFEST write of a
//     background flush or compaction) cannot be recovered and still ends the
//     process: the floor is what keeps a full disk from getting there.
//
// A corrupted file (a checksum that does not match) is reported by pebble's
// DataCorruption event, which by default calls Fatalf; here it is logged and the
// read that found it fails with a CorruptError that names the file and the way out:
// move the data dir aside and start again, and the node re-syncs from its peers.
//
// # Concurrency
//
// Every method is safe for concurrent use. Commit, Load and SetNodeID hold the store
// open (a read lock) while they run; Close takes the write lock, so it waits for them
// and every later call returns ErrClosed. Close is idempotent. Load's callback must
// not call the store.
//
// The dir's lock is an fcntl lock on fanout.lock, dropped by the OS when the process
// dies, so a node killed with kill -9 can start again at once, while a second sidecar
// on the same dir (or a second Open in one process) fails at Open with an error that
// names the dir. pebble keeps its own LOCK file under it.
package store
