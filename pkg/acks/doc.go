// Package acks resolves operations that wait for acknowledgements from peers: a
// Submit with ack ONE, QUORUM or ALL is an Op that completes once enough of its peers
// acknowledged each of its keys at its version, once that can no longer happen, or at
// its deadline.
//
// It knows keys, versions and peers' names, and nothing of how events travel: the
// caller (the node) maps its transport's outcomes onto a Fate (a batcher's
// succeeded or stale task acknowledges; a permanent error fails the peer; an
// overflow, expiry or removal drops it) and the peers' States onto its API's
// PeerAckState. Keys are generic (comparable), and so are versions (cmp.Ordered):
// a fate of version v settles the waiters that need v or older.
//
// # Life of an op
//
// The caller builds an Op over its peers (NewOp) with the number that must
// acknowledge, marks a peer it knows cannot answer (Op.Fail), calls Init with the
// deadline, and registers the op's waiters in the Ledger (Register: one per pending
// peer and key) before it sends anything, so that no fate slips by. It then watches
// the op in a purgatory (package purgatory) under the Keys Register returned. Each
// fate that arrives goes to Ledger.Settle, which resolves the waiters it covers;
// when it resolved some, the caller asks the purgatory to check the Key
// (CheckAndComplete), which calls the op's TryComplete. Done is closed once the op
// completed, by TryComplete, its deadline (OnExpiration first) or ForceComplete;
// Result then gives each peer's State and Detail. Unregister removes what is left of
// its waiters. With no waiters, Ledger.Waiting is 0 and a fate costs one atomic load.
package acks
