package frame

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// bufferPool replaces gRPC's default buffer pool on every connection and server of a
// sidecar. gRPC's default has tiers of 256 B, 4, 16 and 32 KiB and then 1 MiB, and it
// zeroes a pooled buffer's whole capacity on every Get. A Replicate batch of 250
// 100-byte events is ~33 KiB, so each one, sent or received, took a 1 MiB buffer and
// cleared all of it: 9 % of a saturated origin's CPU in pprof (memclrNoHeapPointers
// under sizedBufferPool.Get). Power-of-two tiers up to 4 MiB keep a buffer within 2× of
// the message, so the clearing is proportional to the bytes actually moved.
var bufferPool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(8, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22)
	if err != nil {
		panic(err) // the exponents are constants
	}
	return p
}()

// Static HTTP/2 flow-control windows instead of gRPC's dynamic ones. With dynamic
// windows gRPC estimates the bandwidth-delay product by sending a PING whenever data
// arrives and no estimate is under way: at a moderate rate of small RPCs that is a PING
// and a PING ACK, two more write syscalls, per call. Writes were a quarter of an
// origin's CPU at 10k events/s. The windows are large enough for a full Replicate batch
// (250 × 1 KiB events) without a WINDOW_UPDATE, and memory is used only as data arrives.
const (
	streamWindow = 1 << 20 // bytes per stream
	connWindow   = 4 << 20 // bytes per connection, over all its streams
)

// DialOptions are the transport settings of every sidecar client connection: the
// buffer pool, static flow-control windows and the frame codec.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		DialOption(),
		experimental.WithBufferPool(bufferPool),
		grpc.WithStaticStreamWindowSize(streamWindow),
		grpc.WithStaticConnWindowSize(connWindow),
	}
}

// streamWorkers is how many goroutines a server keeps to run calls. gRPC otherwise
// starts a goroutine per call, whose stack then grows (copystack) through the handler:
// 10 % of a receiver's CPU at 10k events/s. Workers keep their grown stacks; a call
// that finds every worker busy (a long Subscribe or SubmitStream holds one) gets its
// own goroutine as before.
const streamWorkers = 8

// ServerOptions are the same settings for a server, and its stream workers.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		ServerOption(),
		grpc.NumStreamWorkers(streamWorkers),
		experimental.BufferPool(bufferPool),
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
	}
}
