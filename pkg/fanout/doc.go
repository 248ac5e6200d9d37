// Package fanout is the sidecar's domain core: the Node behind the FanoutService the
// local app talks to and the PeerService other sidecars talk to. The node knows no
// gRPC: it takes requests as bytes and answers with bytes and errors; its gRPC edge,
// pkg/grpcapi, decodes, calls it and maps its errors to status codes.
//
// # Life of an event
//
// Submit. The app sends a SubmitRequest; the edge hands its bytes to the node
// undecoded (SubmitBytes; a SubmitStream's requests go to ServeSubmitStream, which
// keeps their answers' order, runs the ack-waiting ones concurrently and lets the
// QUEUED ones share commits: submitstream.go). The node (submit.go)
//
//  1. refuses everything while draining (ErrDraining; the edge says UNAVAILABLE);
//  2. reads the request from its bytes and validates the whole of it against Limits
//     before touching anything (package event's ReadSubmit, which reads each byte
//     once and decodes nothing). A bad request gets an error naming the field
//     ("events[3].task_id: empty"), from what the reader read, and nothing of it is
//     applied;
//  3. refuses a version more than a minute ahead of the node's clock, so that no single
//     write can win a key's last-writer-wins order for good (2^64-1 would), then asks
//     the transport whether it can carry the request (Transport.Admit: the JetStream
//     transport refuses ack ALL and an event over its server's max_payload);
//  4. gives every event with version 0 a version from the node's hybrid logical clock
//     (hlc: wall milliseconds << 16 | counter; monotonic even if the wall clock steps
//     back), appends that version to the event's bytes as the app sent them
//     (wire.AppendEventVersion: no decode, no re-encode), and puts it in the state
//     table (package state) as this node's own write. Each event gets its answer in SubmitResponse.results: ACCEPTED with
//     its revision, STALE (the table holds this version or a newer one: the event is
//     not sent, so [v10, v5] in one request sends v10) or REFUSED (the table is at a
//     bound);
//  5. hands the accepted events, as one slice shared read-only by every destination,
//     to its Transport (transport.go) in one Publish call, which returns once every
//     destination has them queued (the mesh: once each peer's batcher's acceptor has
//     them). The answer is written from bytes (wire.AppendSubmitResponse). A Submit's
//     scratch is pooled and small events' bytes are cut from shared chunks (outArena),
//     so the node's own path allocates a few times per request, not per event.
//
// Send. The transport carries them (transport.go says the contract). The mesh
// (pkg/mesh), the sidecar's, keeps a link per peer: a batcher, a circuit breaker and a
// connection that sends each batch as one ReplicateRequest; it also runs the
// anti-entropy rounds and the bootstrap that decides when the node is ready, and
// reports every event's fate at every peer back to the node (AckFates).
//
// Receive. ReplicateBytes (a peer's Replicate call) and ServeReplicateStream (each
// batch of its ReplicateStream, answered in order through a ReplicateStream the edge
// implements) validate the request, check its origin against the Caller the edge
// read from the connection (auth.go, with Config.AuthenticatePeers), then each event:
// an invalid one (or one more than five minutes ahead of the clock) is INVALID; one from our own
// origin is never stored: STALE if the table holds it or newer (an echo), else
// INVALID and counted (origin.go); otherwise the state table stores it if (version,
// origin) is newer than the key's entry (OK), answers STALE if not, and BUSY only if
// it is at the peers' share of --state-max-keys or --state-max-bytes (90 %: the rest
// is kept for this node's app): the sender pauses and retries. No reader is
// involved, so a slow or absent app never pushes back on its peers.
//
// What a transport brings otherwise (the mesh's anti-entropy rounds, a broker's feed
// and its snapshot at start) comes through Apply, the receive side of the seam: every
// entry is validated first and the whole batch refused naming the first bad one, then
// each is offered to the table by the same last-writer-wins rule; this node's own
// writes of an earlier process are taken back (a restart without --data-dir), and
// entries relayed from another origin are counted. Both entries take one apply path
// (apply.go): the same per-event steps, with what differs between a live delivery and
// a repair or feed said once (applyKind).
//
// The receive path is pass-through (wire.go): the edge hands the request's bytes to
// the node undecoded; package event's ReadEvent takes each event's task_id, version
// and deleted flag and checks the limits by the same rules as Submit's reader
// (FuzzReadEvent holds it to protobuf's decoding); a stored event is one copy of its
// bytes into the table's arena, and Subscribe writes those bytes into its messages
// unchanged (internal/wire's writers), through a send func that takes bytes. At the
// edge, internal/frame's codec passes such bytes through gRPC as frames and leaves
// every other message to gRPC's protobuf codec.
//
// Read. Get and Subscribe read the state table (get.go, subscribe.go). Get returns the
// entries of some task_ids, or pages through a prefix in revision order. Subscribe is
// list+watch: a snapshot (every live entry up to the revision the stream started at,
// then a snapshot_complete message) or a resume (every key changed after
// from_revision, deletions included), then live changes. A stream holds a revision,
// not a queue: it pulls the next changes from the table when it is ready to send and
// waits on Table.Changed when it has read everything. So a reader that falls behind
// sees each key once at its latest, costs no memory, and never blocks a writer or
// another reader. Its messages stay under max_batch_bytes. A stream that falls behind
// the tombstone horizon (it could miss a deletion) ends with ErrCompacted (the edge
// says OUT_OF_RANGE), and so does a from_revision below it: the client subscribes
// again with a snapshot. A snapshot waits until the node's bootstrap has ended (Ready), unless the request sets
// allow_unsynced: before, the table is half-synced, and an app that rebuilds its
// cache from the snapshot (an informer) would see keys vanish or go back to older
// versions than it saw before the node restarted. The open streams are counted
// (GetStatus's subscribers), a live-only one from the revision it follows on;
// SubscribersChanged is closed at each change of the count.
//
// Wait for acks. A Submit with ack ONE, QUORUM or ALL becomes an op of package acks:
// the transport's Publish first tells the node the destinations it hands the events to
// (and which of them cannot acknowledge now: a peer whose breaker is open), and before
// any event is queued the ledger (acks.Ledger) registers one waiter per (destination,
// task_id) and the purgatory (package purgatory) watches the op under the same keys,
// with its deadline (ack_timeout, capped below the call's deadline) on a timing wheel
// (package timingwheel). The transport reports each task's fate at each destination
// (the mesh: every batcher's OnFinal, through AckFates); acks.go maps it onto an
// acks.Fate (OK and STALE acknowledge, overflow, expiry and removal drop, a permanent
// error fails), the ledger settles the waiters that need that version or older and
// the purgatory checks the key. The op completes once the policy is met, can no longer
// be met, or its deadline passes; a cancelled call cancels it. With no waiters the
// ledger costs one atomic load per fate.
//
// # Goroutines
//
// New builds the transport (Config.NewTransport) and starts the tombstone collector
// (every quarter of --tombstone-ttl, on Config.After) and the timing wheel's driver
// (asleep while no ack waits); the transport starts its own (the mesh: its batchers,
// its janitor and anti-entropy). A Subscribe or a replicate stream runs on its
// caller's goroutine (the edge's handler); ServeSubmitStream starts a goroutine per
// ack-waiting request and one that answers QUEUED requests once on disk, and waits
// for them before it returns. Close cancels and waits for the node's goroutines, then
// closes the transport (what is still queued ends with its fate) and the data dir's
// writer. Drain marks the node draining and waits for the transport to empty. Status
// and the Prometheus Collector read atomics and the transport's rows and series, so
// neither adds work to the hot path.
package fanout
