// Package fanout is the sidecar's domain core and its gRPC edges: the FanoutService
// the local app talks to, the PeerService other sidecars talk to, and the Node between
// them.
//
// # Life of an event
//
// Submit. The app sends a SubmitRequest; RegisterFanoutServer's Submit handler (and
// SubmitStream, which reads frames) hands its bytes to the node undecoded, and maps
// errors to status codes (toStatus is the only place that picks a code). The node
// (submit.go)
//
//  1. refuses everything while draining (ErrDraining → UNAVAILABLE);
//  2. reads the request with internal/wire (ParseSubmit, and readEvent for each event)
//     and validates the whole of it against Limits before touching anything. A bad
//     request is then decoded, only to name the field ("events[3].task_id: empty",
//     validateSubmit's words; FuzzReadSubmit checks that the reader and the decoder
//     agree), and nothing of it is applied;
//  3. refuses a version more than a minute ahead of the node's clock, so that no single
//     write can win a key's last-writer-wins order for good (2^64-1 would);
//  4. gives every event with version 0 a version from the node's hybrid logical clock
//     (hlc: wall milliseconds << 16 | counter; monotonic even if the wall clock steps
//     back), appends that version to the event's bytes as the app sent them
//     (wire.AppendEventVersion: no decode, no re-encode), and puts it in the state
//     table (package state) as this node's own write. Each event gets its answer in SubmitResponse.results: ACCEPTED with
//     its revision, STALE (the table holds this version or a newer one: the event is
//     not sent, so [v10, v5] in one request sends v10) or REFUSED (the table is at a
//     bound);
//  5. offers the accepted events, as one slice shared read-only by all peers, to every
//     peer's batcher (package batcher) and returns once each batcher's acceptor has
//     them. The answer is written from bytes (wire.AppendSubmitResponse). A Submit's
//     scratch is pooled and small events' bytes are cut from shared chunks (outArena),
//     so the node's own path allocates a few times per request, not per event.
//
// Send. Each peer has a link: its batcher plus a Replicator (package peers). The
// batcher's workers call link.Process with a batch; Process builds one
// ReplicateRequest, calls the peer with --replicate-timeout, and maps the outcome to the
// batcher's classes: a ReplicateResponse gives per-item outcomes (OK, STALE, BUSY,
// INVALID); peers.ErrCongestion, ErrNetwork and ErrPermanent give the whole-batch
// classes. From the first response the link learns the peer's node id; a peer that
// answers with our own id is this node listed among its peers, and the link is
// dropped.
//
// Receive. PeerServer.Replicate validates the request, then each event: an invalid one
// (or one more than five minutes ahead of the clock) is INVALID; one from our own
// origin is never stored: STALE if the table holds it or newer (an echo), else
// INVALID and counted (origin.go); otherwise the state table stores it if (version,
// origin) is newer than the key's entry (OK), answers STALE if not, and BUSY only if
// it is at the peers' share of --state-max-keys or --state-max-bytes (90 %: the rest
// is kept for this node's app): the sender pauses and retries. No reader is
// involved, so a slow or absent app never pushes back on its peers.
//
// The receive path is pass-through (wire.go): RegisterPeerServer's handler hands the
// request's bytes to the node undecoded; internal/wire's readers take each event's
// task_id, version and deleted flag, and readEvent checks the limits exactly as
// decoding and validateEvent would (FuzzReadEvent); a stored event is one copy of its
// bytes into the table's arena, and Subscribe writes those bytes into its messages
// unchanged (internal/wire's writers). The frame codec (pkg/peers) passes such frames
// through and leaves every other message to gRPC's protobuf codec; it is an option of
// the server (frame.ServerOption, in frame.ServerOptions), not a process-wide
// registration.
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
// the tombstone horizon (it could miss a deletion) ends with OUT_OF_RANGE, and so does
// a from_revision below it: the client subscribes again with a snapshot. A snapshot
// waits until the node's bootstrap has ended (Ready), unless the request sets
// allow_unsynced: before, the table is half-synced, and an app that rebuilds its
// cache from the snapshot (an informer) would see keys vanish or go back to older
// versions than it saw before the node restarted.
//
// Wait for acks. A Submit with ack ONE, QUORUM or ALL becomes an op of package acks:
// before its events are offered, the ledger (acks.Ledger) registers one waiter per
// (peer, task_id) and the purgatory (package purgatory) watches the op under the same
// keys, with its deadline (ack_timeout, capped below the call's deadline) on a timing
// wheel (package timingwheel). Every batcher reports each task's fate through
// OnFinal; acks.go maps it onto an acks.Fate (OK and STALE acknowledge, overflow,
// expiry and removal drop, a permanent error fails), the ledger settles the waiters
// that need that version or older and the purgatory checks the key. The op completes
// once the policy is met, can no longer be met, or its deadline passes; a cancelled
// call cancels it. With no waiters the ledger costs one atomic load per fate.
//
// # Goroutines
//
// New starts run (which drops self-links), the tombstone collector (every quarter of
// --tombstone-ttl) and the timing wheel's driver (asleep while no ack waits); each
// batcher starts its own acceptor and workers. A Subscribe stream runs on its gRPC
// handler's goroutine. Close cancels and waits for all of them, then closes the
// batchers and connections. Drain marks the node draining and waits for the batchers to
// empty. Status and the Prometheus Collector read atomics and batcher Stats, so neither
// adds work to the hot path.
package fanout
