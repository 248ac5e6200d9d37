package frame

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Frame is one gRPC message as bytes: already encoded on the way out, not yet decoded
// on the way in. The sidecar keeps every event in the bytes it was first encoded in
// (by its origin's Node.Submit, once per event, for the state table) and uses frames
// where those bytes cross gRPC unchanged: a peer's Replicate request arrives as a frame
// that pkg/fanout reads with internal/wire and stores event by event without
// decoding, Subscribe sends the stored bytes to the app as frames, and a link sends a
// batch built from its events' stored bytes (internal/wire's AppendReplicate) as a
// frame, or on a stream as an Appender (pkg/peers' stream.go).
//
// A frame passes through only on a server made with ServerOption and a connection
// made with DialOption (ServerOptions and DialOptions include them); elsewhere gRPC's
// protobuf codec refuses it.
type Frame struct{ B []byte }

// Appender is a message that encodes itself: the codec writes it into one pooled
// buffer of EncodedSize bytes with AppendEncoded, which must append exactly that
// many. pkg/peers sends a ReplicateStreamRequest this way: its head, then a batch's
// bytes as they are.
type Appender interface {
	EncodedSize() int
	AppendEncoded(b []byte) []byte
}

// frameCodec is gRPC's protobuf codec, except that it passes a *Frame's bytes through
// in both directions and writes an Appender itself. Any other message goes to gRPC's
// own protobuf codec, unchanged. It is set per server and per connection, never
// registered for the whole process.
type frameCodec struct{ base encoding.CodecV2 }

// codec is the frame codec over gRPC's registered protobuf codec. It holds no state.
var codec = frameCodec{base: encoding.GetCodecV2(grpcproto.Name)}

// ServerOption makes a server read and write frames: a server that hosts
// pkg/grpcapi's FanoutService (Subscribe sends frames) or PeerService (Replicate reads
// one) needs it. Every other message is encoded as gRPC's default codec does.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(codec) }

// DialOption makes a client connection send and receive frames (e.g. a Subscribe
// stream read as frames). Every other message is encoded as gRPC's default codec does.
// Its content-subtype is "proto": the header says application/grpc+proto.
func DialOption() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec))
}

func (frameCodec) Name() string { return grpcproto.Name }

func (c frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*Frame); ok {
		// gRPC writes the message after SendMsg returns and frees what Marshal gave
		// it, so it gets a pooled copy and the caller keeps its buffer.
		return mem.BufferSlice{mem.Copy(f.B, bufferPool)}, nil
	}
	if a, ok := v.(Appender); ok {
		buf := bufferPool.Get(a.EncodedSize())
		*buf = a.AppendEncoded((*buf)[:0])
		return mem.BufferSlice{mem.NewBuffer(buf, bufferPool)}, nil
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
