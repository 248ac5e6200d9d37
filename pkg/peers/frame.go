package peers

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Frame is one gRPC message as bytes: already encoded on the way out, not yet decoded on
// the way in. The sidecar keeps events in the bytes their origin encoded (the receive
// path in pkg/fanout/wire.go, and Replicate batches assembled from events encoded once
// per Submit), so neither side decodes and re-encodes what it only forwards.
type Frame struct{ B []byte }

// frameCodec is gRPC's protobuf codec, except that it passes a *Frame's bytes through
// in both directions. It is registered as "proto" for the whole process, so every
// server and client of the sidecar speaks it without an option; any other message goes
// to gRPC's own protobuf codec, unchanged.
type frameCodec struct{ base encoding.CodecV2 }

func init() {
	encoding.RegisterCodecV2(frameCodec{base: encoding.GetCodecV2(grpcproto.Name)})
}

func (frameCodec) Name() string { return grpcproto.Name }

func (c frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*Frame); ok {
		// gRPC writes the message after SendMsg returns and frees what Marshal gave
		// it, so it gets a pooled copy and the caller keeps its buffer.
		return mem.BufferSlice{mem.Copy(f.B, bufferPool)}, nil
	}
	return c.base.Marshal(v)
}

func (c frameCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*Frame); ok {
		// data is gRPC's and is reused once Unmarshal returns: copy it.
		f.B = f.B[:0]
		for _, buf := range data {
			f.B = append(f.B, buf.ReadOnlyData()...)
		}
		return nil
	}
	return c.base.Unmarshal(data, v)
}
