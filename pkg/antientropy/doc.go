// Package antientropy repairs what the replication fast path can miss: a
// batch dropped on overflow or expiry, a peer killed with events in its inbox, a peer
// away longer than its breaker held events for, a node that is new or restarted, a
// key a state table refused at its bound.
//
// # A round
//
// A node (the caller) compares its state table with one peer's (the receiver), in
// three steps, all of them calls on the receiver's PeerService:
//
//  1. Digest, down the tree. Both tables keep a tree of hashes over their entries
//     (state/digest.go): 65,536 leaves by the key's hash, 16-way inner nodes, each
//     node the XOR of every (task_id, version, origin, deleted) below it. The caller
//     asks for the root's children, compares them with its own, and asks for the
//     children of the ones that differ, down to the leaves. Two tables in sync stop
//     at the first call: one request and a 150-byte answer. 10,000 keys apart cost
//     four calls and about 600 KiB of hashes.
//  2. Pull, leaf by leaf. For the differing leaves the caller sends the stamps
//     (task_id, version, origin, deleted) of its entries there, in groups of at most
//     MessageBytes. The receiver streams back its entries of those leaves that the
//     caller lacks or holds older, and then the task_ids the caller holds newer or the
//     receiver lacks. The caller applies the entries (last-writer-wins: a table
//     never goes back).
//  3. Push: the caller sends the receiver the entries it asked for.
//
// Both directions are repaired in one round; a round with a peer whose tables changed
// meanwhile may leave a difference, which the next round finds. Tombstones are
// entries like any other, so a deletion a peer missed is repaired too; one older than
// --tombstone-ttl is not stored again (state.Table refuses it).
//
// # Cost
//
// The digest tree is updated on every write (one XOR per level), so a round in sync
// reads nothing but five hashes. A round that differs reads the caller's table once
// to size the groups and once per group, and the receiver's once per group, a bounded
// step at a time under the table's lock.
//
// # Bounds
//
// A peer may be frozen, cut off, slow, or lying; a round with it must cost a bounded
// time and a bounded number of bytes, and end with an error naming what it broke
// (Config, "The bounds of a round"; limits.go):
//
//   - Time. Each Digest and each Push call has CallTimeout (the node's
//     --replicate-timeout, 5s). A Pull stream may be silent for CallTimeout at most
//     (before its first message and between two; the caller's own time on a message
//     does not count) and last PullTimeout (1m) at most. A call past its deadline
//     ends the round with ErrTimeout, naming the call (Result.TimedOut). A peer that
//     answers Digest and then hangs in Pull costs its round 5s, and nothing else:
//     the node runs each round on its own goroutine (pkg/fanout sync.go).
//   - Bytes in. A Digest answer is 16 hashes per node asked about: the whole tree is
//     ~600 KiB. Pull answers are at most MessageBytes a message and PullBytes (64
//     MiB) a round; past it the round stops pulling (Result.PullCut) and the next
//     one goes on from there.
//   - Bytes out. A round pushes at most PushEntries (10,000) distinct keys and
//     PushBytes (4 MiB) to a peer, each key once and only keys of the leaves asked
//     about, however much the peer asks for. A peer that asks for more
//     (Result.PushCut) is held by its Gate: nothing is pushed to it for PushHold
//     (1m), doubling with each such round in a row up to PushHoldMax (16m). An
//     honest peer that asks for the whole table (a new or wiped node) pulls it in
//     its own rounds; a lying peer that asks for it every round gets 10,000 entries
//     per hold, not the whole table each round.
//
// The package holds no connections and starts no goroutines: the node calls Round
// on its schedule, and its PeerService calls Digest, Pull and Push.
package antientropy
