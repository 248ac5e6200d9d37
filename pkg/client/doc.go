// Package client is a Go application's side of a fanout sidecar: the calls of its
// app listener (FanoutService) with typed results, and the three things every Go app
// otherwise writes for itself.
//
//   - Client: New (or Dial) connects to the sidecar's --app-addr (host:port or
//     unix:///path; plaintext, or WithTLS; WithToken/WithTokenFile for a sidecar
//     started with --app-token-file). Put and Delete submit one event with an ack
//     policy (Queued, One, Quorum, All) and WithAckTimeout; Get reads keys; List
//     pages through a prefix (ListAll reads every page).
//   - Watch: list then watch a prefix (Subscribe with a snapshot), resumed by itself
//     after a broken stream from the last revision read. A resume the sidecar refuses
//     with OUT_OF_RANGE (it restarted: revisions are per process; or it forgot the
//     tombstones of that time) takes a new snapshot and delivers only what differs
//     from what was delivered, so the caller sees each key's states in rising
//     version order, none twice, and a key deleted meanwhile as a Delete.
//   - Cache: an informer over a Watch: a local map with HasSynced, WaitForSync,
//     handlers OnAdd, OnUpdate and OnDelete, and read-only Get and List.
//   - Publisher: asynchronous puts. Put queues one event and returns its Pending
//     result at once; one sender packs the queued events into SubmitStream requests
//     (up to 10000 events and MaxBatchBytes each) while earlier ones are in flight,
//     so many goroutines putting one event each share few requests. Queued and
//     in-flight bytes are bounded by MaxBytes: Put blocks when full until room frees
//     or its ctx ends. Flush waits for everything put before it; Close stops.
//
// # Results and errors
//
// A Put's Result says what the sidecar did (Accepted with its Version and Revision,
// Stale with the winning CurrentVersion and CurrentOrigin, Refused with Detail) and
// whether the ack policy was Satisfied, with one PeerAck per peer. The error is nil
// only for an accepted event whose policy was met; otherwise a *ResultError
// (errors.Is ErrStale, ErrRefused, ErrNotSatisfied) that carries the Result, or an
// *Error of the call that keeps its gRPC status (status.Code works on it;
// errors.Is ErrInvalid, ErrUnavailable, ErrUnauthenticated, ErrTooLarge, and
// context.Canceled or context.DeadlineExceeded).
//
// # Versions and revisions
//
// A version orders the writes of one key on every node (the sidecar assigns a
// hybrid-logical-clock one unless WithVersion gives yours; ties break on the origin
// node id). A revision is one node's count of its changes: rising on that node, not
// comparable between nodes, and new with each process of a sidecar started without
// --data-dir. Watch resumes by revision and filters by version.
package client
