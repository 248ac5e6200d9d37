// Package grpcapi is the sidecar's gRPC edge: fanout.v1.FanoutService, which the
// local app calls, and fanout.v1.PeerService, which other sidecars call, over a
// fanout.Node that knows no gRPC. A handler only decodes, calls the node and maps its
// errors to status codes (toStatus, the one place that picks a code). Submit and
// Replicate take their requests as frames (internal/frame), so the node reads the
// bytes the client sent without a decode here; Subscribe and SubmitStream pass the
// node's answers out as frames the same way, and SubmitStream's ordering, ack waits
// and group commit are the node's (Node.ServeSubmitStream). The replicate stream is
// the node's too (Node.ServeReplicateStream); the edge gives it a fanout.ReplicateStream
// that says the node's receive limit as a header and a batch's failure as the status
// code its unary call would end with. Peer authentication is split the same way: the
// edge reads the caller's identities from its verified client certificate
// (peertls.Caller) and hands them to the node as a fanout.Caller; the node decides.
// The servers must be made with frame.ServerOption (frame.ServerOptions includes it).
package grpcapi
