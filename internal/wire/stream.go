package wire

import "google.golang.org/protobuf/encoding/protowire"

// AppendReplicateStreamHead appends to b the head of a fanout.v1.ReplicateStreamRequest:
// its seq, and the tag and length of its batch, a ReplicateRequest of batchLen bytes
// that the caller appends next (AppendReplicate's). The batch is then sent as it was
// encoded, with no copy into a new message.
func AppendReplicateStreamHead(b []byte, seq uint64, batchLen int) []byte {
	if seq != 0 {
		b = protowire.AppendTag(b, ReplicateStreamRequestSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, seq)
	}
	b = protowire.AppendTag(b, ReplicateStreamRequestBatch, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(batchLen))
}

// ReplicateStreamHeadSize is the length AppendReplicateStreamHead appends.
func ReplicateStreamHeadSize(seq uint64, batchLen int) int {
	n := protowire.SizeTag(ReplicateStreamRequestBatch) + protowire.SizeVarint(uint64(batchLen))
	if seq != 0 {
		n += protowire.SizeTag(ReplicateStreamRequestSeq) + protowire.SizeVarint(seq)
	}
	return n
}

// ParseReplicateStream reads a ReplicateStreamRequest: it returns the seq, and reads
// the batch into r as ParseReplicate does. A batch that appears more than once is
// merged, as protobuf merges a repeated message field (each occurrence is parsed into
// r); a repeated seq keeps the last. Unknown fields are skipped. It returns
// ErrMalformed for bytes protobuf would refuse.
func ParseReplicateStream(b []byte, r *Replicate) (seq uint64, err error) {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return 0, ErrMalformed
		}
		b = b[n:]
		switch {
		case num == ReplicateStreamRequestSeq && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, ErrMalformed
			}
			seq, b = v, b[n:]
		case num == ReplicateStreamRequestBatch && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, ErrMalformed
			}
			if err := ParseReplicate(v, r); err != nil {
				return 0, err
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, ErrMalformed
			}
			b = b[n:]
		}
	}
	return seq, nil
}
