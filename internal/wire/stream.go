package wire

import "google.golang.org/protobuf/encoding/protowire"

// AppendReplicateStreamHead appends to b the head of a fanout.v1.ReplicateStreamRequest:
// its seq, and the tag and length of its batch, a ReplicateRequest of batchLen bytes
// that the caller appends next (AppendReplicate's). The batch is then sent as it was
// encoded, with no copy into a new message. A hold, if any, follows the batch
// (AppendReplicateStreamHold): the fields in number order, as proto.Marshal writes them.
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

// AppendReplicateStreamHold appends a ReplicateStreamRequest's answer_hold_micros
// (nothing for 0), after its batch.
func AppendReplicateStreamHold(b []byte, hold uint32) []byte {
	if hold == 0 {
		return b
	}
	b = protowire.AppendTag(b, ReplicateStreamRequestHold, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(hold))
}

// ReplicateStreamHoldSize is the length AppendReplicateStreamHold appends.
func ReplicateStreamHoldSize(hold uint32) int {
	if hold == 0 {
		return 0
	}
	return protowire.SizeTag(ReplicateStreamRequestHold) + protowire.SizeVarint(uint64(hold))
}

// StreamHead is what a ReplicateStreamRequest says besides its batch.
type StreamHead struct {
	Seq uint64
	// HoldMicros is answer_hold_micros: how long the answer may wait (0: answer now).
	HoldMicros uint32
}

// ParseReplicateStream reads a ReplicateStreamRequest: it returns the seq and the
// hold, and reads the batch into r as ParseReplicate does. A batch that appears more
// than once is merged, as protobuf merges a repeated message field (each occurrence
// is parsed into r); a repeated seq or hold keeps the last; a hold wider than 32 bits
// is truncated, as protobuf truncates a uint32. Unknown fields are skipped. It returns
// ErrMalformed for bytes protobuf would refuse.
func ParseReplicateStream(b []byte, r *Replicate) (h StreamHead, err error) {
	for len(b) > 0 {
		num, typ, n := ConsumeTag(b)
		if n < 0 {
			return StreamHead{}, ErrMalformed
		}
		b = b[n:]
		switch {
		case num == ReplicateStreamRequestSeq && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return StreamHead{}, ErrMalformed
			}
			h.Seq, b = v, b[n:]
		case num == ReplicateStreamRequestHold && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return StreamHead{}, ErrMalformed
			}
			h.HoldMicros, b = uint32(v), b[n:]
		case num == ReplicateStreamRequestBatch && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return StreamHead{}, ErrMalformed
			}
			if err := ParseReplicate(v, r); err != nil {
				return StreamHead{}, err
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return StreamHead{}, ErrMalformed
			}
			b = b[n:]
		}
	}
	return h, nil
}
