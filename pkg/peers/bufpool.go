package peers

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

// BufferPoolDialOption makes a client connection use the sidecar's buffer pool.
func BufferPoolDialOption() grpc.DialOption { return experimental.WithBufferPool(bufferPool) }

// BufferPoolServerOption makes a server use the sidecar's buffer pool.
func BufferPoolServerOption() grpc.ServerOption { return experimental.BufferPool(bufferPool) }
