// Package antientropy repairs what the replication fast path can miss (SPEC §14): a
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
// The package holds no connections and starts no goroutines: the node calls Round
// on its schedule, and its PeerService calls Digest, Pull and Push.
package antientropy
