// Package jetstream is the transport of fanout on a NATS JetStream stream: past the
// mesh's few tens of nodes, every node publishes its accepted events to one
// replicated stream and reads everyone's back from it, instead of sending each to
// every peer. It implements fanout.Transport; the node does not know NATS.
//
// # The stream
//
// The stream is in the KV format, so that the `nats kv` tools read it: named
// KV_<bucket>, subjects $KV.<bucket>.<key>, one message per key (history 1), direct
// get, rollup allowed, replicated by Raft (Config.Replicas). A message is one event:
//
//	subject  $KV.fanout.app.instance-1            the key of task_id "app/instance-1"
//	header   Fanout-Version: 1764164842000000001   the event's version
//	         Fanout-Origin: node-a                the node that accepted it
//	         Fanout-Submitted-At: 1764164842000000000  when, in unix nanoseconds
//	         KV-Operation: DEL                    only for a delete marker
//	value    the event's bytes (fanout.v1.Event), as the node stores them
//
// A delete is an event too (deleted set): its marker keeps the event's bytes and
// headers, so last-writer-wins applies to it as to a value, and `nats kv` sees a
// deleted key. decodeMessage is the one reader of a message: it names the header or
// field that is wrong, and checks the headers against the event (task_id against the
// subject, version, deleted against the operation), so the engine's comparison and
// the node's agree.
//
// # Keys and subjects
//
// A task_id becomes its key (encodeKey): '/' becomes '.', bytes of
// [A-Za-z0-9_-] stay, every other byte becomes "=HH" (hex), and an empty segment (a
// leading, trailing or doubled '/') becomes the token "=". Why this encoding:
//
//   - Subjects split on '.', and an app names its keys as paths ("app/instance");
//     making each path segment one token makes a prefix watch of "app/" the subject
//     filter "app.>", served by the server's subject index rather than by reading
//     every key (prefixFilter). A prefix that ends inside a segment filters on its
//     whole segments and the feed keeps the matching task_ids.
//   - It is reversible: '=' is never written as itself, so "=HH" and the lone "="
//     cannot be confused, and decodeKey refuses anything encodeKey does not write
//     (fuzzed both ways). The key of a prefix is a prefix of the key (but for a
//     trailing "=").
//   - Its output is [A-Za-z0-9_=.-] with no empty token: a valid subject, and a key
//     `nats kv get` takes. At most three bytes per byte, so a task_id of the node's
//     1,024 bytes makes a subject of at most 3,072 + the bucket's; Config.validate
//     checks that the longest API subject (a direct get) stays within the server's
//     4,096-byte protocol line.
//   - The common case costs nothing: a task_id of letters, digits, '-', '_' and '/'
//     is its key with '.' for '/', readable in `nats kv ls`.
//
// The encoding does not keep order (the server has no ordered scan to serve anyway).
//
// # Last-writer-wins, kept by the engine
//
// A stream with history 1 keeps a key's last arrival, not its winner. So a publish
// expects the key's last subject sequence (Nats-Expected-Last-Subject-Sequence): it
// lands only if no one wrote the key since. On a wrong sequence the publisher reads
// the key's message (direct get), compares (version, origin) and answers STALE if the
// stream holds a newer one, or publishes again expecting the new sequence, at most
// Config.MaxAttempts times (cas.go: a deterministic core, checked against a model of
// the stream). The stream then only ever holds each key's winner, so a node that
// reads it gets the same state as every other.
//
// # The feed
//
// Each node reads the stream with one ordered consumer (feed.go; not kv.Watch, the
// legacy push consumer): ephemeral, filtered on $KV.<bucket>.>, delivering first the
// last message per key (the snapshot), or every message after a saved sequence (a
// restart on --data-dir, below), then every new message. The client library
// recreates it from the next sequence after a gap or a reconnect, with back-off (1 s
// to 10 s); one the client could not delete expires on the server after 30 s idle,
// so reconnect storms leave no consumers behind. A consumer can also stop delivering
// while its heartbeats go on (seen after the partition of its server healed): every
// Config.FeedCheck (5 s) that nothing arrived, the feed asks the stream's leader for
// the first message after its position, and if there is one twice in a row it starts
// a new consumer from the position (counted as a reset). Every message goes through
// the node's one apply path (fanout.Node.Apply), from its origin: Apply validates the
// event, resolves last-writer-wins against the state table and skips the echo of the
// node's own writes. A message this transport did not write (a `nats kv put`) is
// skipped and counted. The feed is ready once it has applied up to the stream's last
// sequence as of its start (the server says nothing is pending), at once if there is
// nothing to apply.
//
// # Restarts on a data dir (position.go)
//
// With Config.Checkpoint (the sidecar's --data-dir store) the transport saves its
// position every second: the stream's name and creation time, the last sequence the
// feed applied (only once the table's changes up to it are on disk, so a crash never
// resumes past what the table lost), the time after which every later message was
// stored, and the outbox's mark (a minute before its oldest event). A restarted node
// loads its table from the data dir, then:
//
//   - resumes the feed after the saved sequence, reading only what changed while it
//     was down, unless the stream was made again since, or a delete marker written
//     after the saved sequence may have been purged (the saved time is older than
//     the tombstone TTL): then it reads the snapshot;
//   - publishes again its own events in the table accepted at or after the outbox's
//     mark: those that were in the outbox. One that made it before the restart is
//     found stored (or stale) by its first put.
//
// # Delete markers (purge.go)
//
// A delete marker leaves the stream after Config.TombstoneTTL (--tombstone-ttl, as
// the node forgets a tombstone): on a server with per-message TTLs (2.11 on) the
// stream allows them and each marker carries a Nats-TTL header; on an older one the
// sidecars purge the markers their feed applied, each its own after the TTL and any
// once twice as old, removing only the key's messages up to the marker.
//
// # The transport, one event's way
//
// New(cfg, nc, node) takes the caller's connection (it dials, with credentials and
// TLS) and returns at once; its start goroutine opens the stream and starts the feed,
// retrying with back-off (100 ms to 10 s), so a NATS unreachable at start makes a
// node that is not ready and says why ("connecting to NATS", "NATS unreachable:
// ...", "opening stream KV_x on <server>", or the stream's error), then "reading
// the stream's snapshot: N messages to apply", then ready.
//
//  1. Submit asks Admit first, before the node stores anything: ack ALL is refused
//     (the stream's ack says nothing of the other nodes' receipt), and so is an event
//     that with its headers would be over the server's max_payload (the error names
//     both it and --max-event-bytes): an INVALID_ARGUMENT.
//  2. Publish hands the accepted events to the outbox, bounded in bytes
//     (Config.OutboxBytes): past it an event is dropped as FateOverflow, counted.
//     The transport has one destination, the stream; a Submit that waits for an ack
//     is told at once that it cannot be had if NATS has been unreachable since the
//     start, and otherwise waits up to its deadline (a lost server, an election).
//  3. Config.Publishers (64) goroutines take events from the outbox and put each into
//     the stream: the CAS loop above, starting from the key's sequence the feed last
//     applied while the node's table still holds the event (hints.go: one round trip
//     for an update), else expecting no message (one round trip for a new key; a key
//     the stream holds meets a conflict and is read); from a direct get of the key
//     when the table holds a newer write than the event. A landed or stored
//     event is FateSucceeded, a stale one FateStale; a failing stream or connection,
//     or an event that spent its attempts (a hot key, or reads from a replica cut
//     off from the leader), is retried with back-off (100 ms to 5 s) until the
//     event's expiry (FateExpired) or Close (FateStopped): an event the node accepted
//     is never given up while the transport runs.
//
// So the acks mean: QUEUED, the event is in this sidecar's outbox (with --data-dir:
// on its disk, and published again after a restart); ONE and QUORUM alike, the stream's publish ack: the event, or a newer
// one of its key, is committed by a majority of the stream's replicas (and on their
// disks at the server's sync interval).
//
// Drain waits until the outbox is empty and nothing is in flight. Peers has one row,
// the stream's (its address is the stream's name, its node id the server's URL).
// Close stops the start goroutine, the publishers and the feed, and ends what is left
// in the outbox as FateStopped; the caller closes the connection after it.
//
// The series (Collect): fanout_jetstream_publish_seconds (a put, conflicts
// included), fanout_jetstream_cas_conflicts_total, _cas_retries_total,
// _cas_gave_up_total, fanout_jetstream_feed_lag_messages,
// _feed_applied_sequence, _feed_foreign_total, _feed_refused_total,
// _feed_resets_total, _position_saved_sequence, _republished_total,
// _markers_purged_total,
// fanout_jetstream_reconnects_total, fanout_jetstream_outbox_bytes,
// _outbox_events, _outbox_overflow_total.
package jetstream
