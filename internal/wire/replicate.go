package wire

import "google.golang.org/protobuf/encoding/protowire"

// AppendReplicate appends a fanout.v1.ReplicateRequest of n events to b: origin_node,
// each event as the bytes event(i) returns (an encoded fanout.v1.Event, embedded as
// is: the origin encodes an event once and sends those bytes to every peer), and
// submitted_at_unix_nanos packed, submitted(i) each. proto.Unmarshal reads it as the
// request proto.Marshal would write (TestAppendReplicate).
func AppendReplicate(b []byte, origin string, n int, event func(i int) []byte, submitted func(i int) int64) []byte {
	if origin != "" {
		b = protowire.AppendTag(b, ReplicateRequestOriginNode, protowire.BytesType)
		b = protowire.AppendString(b, origin)
	}
	for i := range n {
		b = protowire.AppendTag(b, ReplicateRequestEvents, protowire.BytesType)
		b = protowire.AppendBytes(b, event(i))
	}
	size := 0
	for i := range n {
		size += protowire.SizeVarint(uint64(submitted(i)))
	}
	if n > 0 {
		b = protowire.AppendTag(b, ReplicateRequestSubmittedAtUnixNanos, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		for i := range n {
			b = protowire.AppendVarint(b, uint64(submitted(i)))
		}
	}
	return b
}
