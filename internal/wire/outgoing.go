package wire

import "google.golang.org/protobuf/encoding/protowire"

// Outgoing is one of a node's own events on its way to the other nodes: the Event's
// bytes as stored, its version included, and that version. The node encodes it once,
// when Submit stores it, and every transport sends those bytes (the mesh embeds them in
// each peer's Replicate request with AppendReplicate): with P peers, one encoding
// instead of 1 + P. Raw is shared read-only by every destination and never changed.
//
// It lives here, beside the readers and writers of the bytes it carries, because both
// sides of the transport seam use it (pkg/fanout builds it, pkg/mesh sends it) and
// neither imports the other.
type Outgoing struct {
	Raw     []byte
	Version uint64
	// Awaited: a Submit waits for the destinations' acknowledgements of this event
	// (ack QUORUM or ALL), so a transport must not hold back their answers.
	Awaited bool
}

// ReplicateItemBytes is what an event of n encoded bytes adds to a ReplicateRequest:
// its events field (tag, length, the event) and its submitted_at_unix_nanos entry
// (packed, at most 10 bytes).
func ReplicateItemBytes(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n + 10 }

// MessageOverhead is room, in a message's size bound, for its fields other than the
// events it carries: a ReplicateRequest's origin_node (at most 1024 bytes: a node id)
// and the header of its packed submitted_at_unix_nanos; a Push or Pull message's node
// id. 4 KiB. (A function: this package's constants are field numbers.)
func MessageOverhead() int { return 4 << 10 }
