// Package mesh is the full-mesh transport of a fanout node (fanout.Transport): every
// sidecar sends its own events to every other one, with no broker. It is the node's
// only way out to its peers, and the PeerService's anti-entropy side.
//
// # Life of an event
//
// Publish. The node's Submit hands the events it accepted, one slice shared
// read-only, to Publish, which offers it to every peer's batcher (package batcher)
// and returns once each batcher's acceptor has it. The peer set is read once, without
// a lock (copy-on-write), so an ack-waiting Submit counts the same peers it offers to:
// Publish's track callback gives the node those peers, and "circuit breaker open" for
// each whose breaker is open, before any event is queued.
//
// Send. Each peer has a link (link.go): its batcher, a circuit breaker (package
// breaker: network failures open it; while open the batcher holds the peer's events,
// coalesced by task_id, bounded) and a Conn (package peers). The batcher's workers call
// link.Process with a batch; Process builds one ReplicateRequest from the events'
// bytes (wire.AppendReplicate: no encoding), calls the peer with --replicate-timeout,
// and maps the outcome to the batcher's classes: a ReplicateResponse gives per-item
// outcomes (OK, STALE, BUSY, INVALID); peers.ErrCongestion, ErrNetwork, ErrTooLarge
// and ErrPermanent give the whole-batch classes. From the first response the link
// learns the peer's node id and incarnation: a peer that answers with this node's id
// and incarnation is this node listed among its peers (its link is dropped, its
// address never added again); this node's id with another incarnation, or one id from
// two addresses, is a conflict (members.go: logged, in GetStatus and /metrics).
//
// Fate. Every event leaves a batcher once, with a fate (succeeded, stale, overridden,
// overflow, expired, permanent, too large, stopped); the batcher's OnFinal reports it
// to the node's ack ledger through the function the node gave (Node.AckFates), a
// plain call that costs one atomic load while no Submit waits.
//
// Budget. All the batchers charge one batcher.Budget of --max-pending-bytes
// (budget.go): the peers that are down keep to half of it and lose their oldest
// events first; anti-entropy repairs them.
//
// # Membership
//
// SetPeers (static --peers and DNS discovery) makes a link for a new address at once,
// and gives it an anti-entropy round as soon as the rounds' goroutine is free; an
// address that leaves stops getting events and is sent what it had pending for
// --peer-removal-grace (on Config.After), then closed: what is left ends FateStopped
// ("peer removed" to ack waiters). Named again within the grace, it comes back as it
// was. A Replicate from a node outside the set calls Config.OnUnknownPeer (at most
// once a second; NoteCaller), so that discovery refreshes at once.
//
// # Anti-entropy and readiness
//
// At start the mesh bootstraps (sync.go): once Config.ReadyCheck passes, it runs a
// round (package antientropy) with every peer at once and turns ready when all have
// ended, or --sync-timeout passed (Ready, Readiness). Then it starts a round with the
// next peer every --anti-entropy-interval, ±25 %, each on a goroutine of its own (at
// most one per peer, maxRoundsInFlight in all), so a peer that hangs holds up only its
// own round. What a round brings is stored through the node's one apply path
// (Node.Apply). Anti-entropy talks to a peer through the Conn's antientropy.Peer side,
// which the in-memory peers.FakeConn implements too (peers.FakeNetwork.HandleSync):
// rounds run in tests without sockets. The PeerService's handlers answer the peers'
// rounds with Digest, Pull and Push.
//
// # Goroutines
//
// New starts run (which drops self-links) and anti-entropy (which bootstraps first);
// each batcher starts its own acceptor and workers; each round, each bootstrap round
// and each leaving link's grace has one. Every wait goes through Config.After, so a
// test drives time. Close (the node calls it from its own) cancels and waits for all
// of them, then closes the leaving links and the links: the batchers give every
// leftover event its fate. Status rows (Peers) and the series (Describe, Collect) read
// atomics and batcher Stats, so neither adds work to the hot path.
package mesh
