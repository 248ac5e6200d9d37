// Package frame carries gRPC messages as bytes, and holds the transport settings every
// gRPC server and client connection of a sidecar shares.
//
// A [Frame] is one message already encoded on the way out, or not yet decoded on the
// way in. The codec behind [ServerOption] and [DialOption] passes a frame's bytes
// through and hands every other message to gRPC's protobuf codec; it is set per server
// and per connection, never registered for the whole process. Both listeners use it
// (the app listener's Submit and Subscribe, the peer listener's Replicate and
// ReplicateStream) and so does the peer client (pkg/peers), so that an event crosses
// gRPC in the bytes its origin encoded, without a decode or an encode on the way.
//
// [ServerOptions] and [DialOptions] add to the codec a buffer pool sized for
// Replicate batches, static HTTP/2 flow-control windows, and a server's stream
// workers: the reasons are next to each setting (transport.go).
//
// The package imports nothing of the sidecar but gRPC: it sits below pkg/peers,
// pkg/grpcapi and the load generator alike.
package frame
