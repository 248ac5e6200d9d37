// Package peers owns the connections from this sidecar to its peer sidecars: parsing
// the static peer list, dialing, and the replicate client.
//
// # Life of a batch
//
// The fanout dispatcher builds one [Conn] per peer address with [Dial]. A batcher
// worker in package fanout hands a batch, already encoded, to Conn.ReplicateFrame.
// The batch goes on the connection's fanout.v1.PeerService/ReplicateStream under a
// seq number (stream.go): one stream per connection carries the batches of every
// worker, so several are in flight at once, and a reader goroutine hands each answer
// to the batch with its seq. A peer without the stream (a sidecar before API v1.1)
// and Options.Unary get one unary Replicate RPC per batch instead. Either way the
// answer comes back in one of five shapes:
//
//   - a ReplicateResponse: the peer looked at every event (per-item statuses);
//   - an error wrapping [ErrCongestion]: the peer is overloaded or too slow
//     (RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED);
//   - an error wrapping [ErrTooLarge]: the batch is bigger than the peer takes;
//   - an error wrapping [ErrNetwork]: the peer could not be reached (UNAVAILABLE, a
//     connection error, a stream that broke);
//   - an error wrapping [ErrPermanent]: anything else; retrying will not help.
//
// On the stream, a failed batch is answered with the status code its unary call would
// have ended with, so both are classified by the same table.
//
// This file's package is the only place where gRPC status codes of the client side are
// looked at: callers branch on the three sentinels with errors.Is and never see a
// codes.Code.
//
// The in-memory [FakeNetwork] stands in for real connections in tests of the
// dispatcher, the way memberlist ships a mock transport next to its real one.
package peers
