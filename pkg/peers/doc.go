// Package peers owns the connections from this sidecar to its peer sidecars: parsing
// the static peer list, dialing, and the Replicate client.
//
// # Life of a Replicate call
//
// The fanout dispatcher builds one [Conn] per peer address with [Dial]. A batcher
// worker in package fanout hands a batch to Conn.Replicate, which sends one
// fanout.v1.PeerService/Replicate RPC. The answer comes back in one of four shapes:
//
//   - a ReplicateResponse: the peer looked at every event (per-item statuses);
//   - an error wrapping [ErrCongestion]: the peer is overloaded or too slow
//     (RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED);
//   - an error wrapping [ErrNetwork]: the peer could not be reached (UNAVAILABLE or a
//     connection error);
//   - an error wrapping [ErrPermanent]: anything else; retrying will not help.
//
// This file's package is the only place where gRPC status codes of the client side are
// looked at: callers branch on the three sentinels with errors.Is and never see a
// codes.Code (SPEC §5, STYLE §12).
//
// The in-memory [FakeNetwork] stands in for real connections in tests of the
// dispatcher, the way memberlist ships a mock transport next to its real one.
package peers
