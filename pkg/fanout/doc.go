// Package fanout is the sidecar's domain core and its gRPC edges: the FanoutService
// the local app talks to, the PeerService other sidecars talk to, and the Node between
// them.
//
// # Life of an event
//
// Submit. The app sends a SubmitRequest to FanoutServer.Submit, a thin adapter that
// calls Node.Submit and maps errors to status codes (toStatus is the only place that
// picks a code). Node.Submit
//
//  1. refuses everything while draining (ErrDraining → UNAVAILABLE);
//  2. validates the whole request against Limits before touching anything, so a bad
//     request is refused with the field named ("events[3].task_id: empty") and nothing
//     of it is applied;
//  3. gives every event with version 0 a version from the node's hybrid logical clock
//     (hlc: wall milliseconds << 16 | counter; monotonic even if the wall clock steps
//     back), and records each event in the version table as this node's own write, so
//     an older remote write of the same task is never delivered here afterwards;
//  4. offers the events, as one slice shared read-only by all peers, to every peer's
//     batcher (package batcher) and returns once each batcher's acceptor has them.
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
// is INVALID; one from our own origin is STALE (never echoed); otherwise the version
// table admits it only if (version, origin) is newer than what it holds, and only if
// the inbox takes it. Check, put and record happen under the table shard's lock, so a
// BUSY event leaves no trace and its retry is not mistaken for a duplicate. The table
// is a sharded LRU bounded by --version-memory.
//
// The receive path is pass-through (wire.go): RegisterPeerServer's handler hands the
// request's bytes to the node undecoded; a protowire reader takes each event's task_id
// and version and checks the limits exactly as decoding and validateEvent would
// (FuzzReadEvent); an admitted event is one copy of its bytes, and Subscribe writes
// those bytes into its messages unchanged. A process-wide "proto" codec (pkg/peers,
// frame.go) passes such frames through and leaves every other message to gRPC's
// protobuf codec.
//
// Deliver. The inbox is bounded (--inbox-capacity) and keeps the latest event per
// task_id in place, like a batcher's pending. A single pump goroutine moves events, in
// order, to every Subscribe stream whose prefix matches. With nobody subscribed, events
// wait; when the inbox is full, Replicate answers BUSY, and the sender pauses and
// retries: a slow app pushes back on its peers instead of losing events. A stream that
// asked for max_batch > 1 gets the deliveries already waiting packed into one message.
// When a stream ends, what it had not sent (its buffer, a failed send) goes back to the
// head of the inbox for the next subscriber; only what gRPC already accepted is gone.
//
// Wait for acks. A Submit with ack ONE, QUORUM or ALL becomes an ackOp: before its
// events are offered, the ackLedger registers one waiter per (peer, task_id) and the
// purgatory (package purgatory) watches the op under the same keys, with its deadline
// (ack_timeout, capped below the call's deadline) on a timing wheel (package
// timingwheel). Every batcher reports each task's fate through OnFinal; the ledger
// settles the waiters that need that version or older (OK and STALE acknowledge,
// overflow, expiry and removal drop, a permanent error fails) and asks the purgatory to
// check the key. The op completes once the policy is met, can no longer be met, or its
// deadline passes; a cancelled call cancels it. With no waiters the ledger costs one
// atomic load per fate.
//
// # Goroutines
//
// New starts the inbox pump, run (which drops self-links) and the timing wheel's
// driver (asleep while no ack waits); each batcher starts its own acceptor and workers. Close cancels and waits for all of them, then closes the
// batchers and connections. Drain marks the node draining and waits for the batchers to
// empty. Status and the Prometheus Collector read atomics and batcher Stats, so neither
// adds work to the hot path.
package fanout
