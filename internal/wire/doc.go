// Package wire is the sidecar's hand-written protobuf: the few fanout.v1 messages it
// reads and writes with protowire instead of the generated code, and the field numbers
// they use, in one place.
//
// Why by hand. An event stays in the bytes its origin encoded, from the Replicate
// request to the Subscribe message. Decoding every replicated event into an Event (its
// struct, strings, payload, map) and encoding it again for each subscriber was a third
// of a saturated receiver's CPU, most of it GC. So the receiver reads only what it
// decides on, copies the event's bytes once into its state table, and writes them into
// Subscribe messages unchanged. The wire format is fanout.v1's; peers and apps see no
// difference.
//
// The life of a replicated event's bytes:
//
//   - A peer's ReplicateRequest arrives undecoded (a frame.Frame). ParseReplicate
//     splits it into the origin, each event's bytes, and the submission times.
//   - ReadEvent reads one event: task_id (and where it is in the bytes, for the table's
//     key), version, deleted, and the sizes pkg/fanout checks its limits with.
//     DistinctAttributes counts the attributes as a decoded map would, when a repeated
//     key may have taken an event over a limit. TaskIDOffset finds the task_id of an
//     event the node encoded itself (Submit) or loaded from disk.
//   - Subscribe writes each delivery with AppendEntry (one event per message) or
//     AppendBatchItem (a batch), EntrySize and BatchItemSize sizing a message before
//     it is written, and AppendSnapshotComplete.
//   - The bench's subscribers (internal/loadgen) read those messages back with
//     EachDelivery, taking only the task_id, version, payload and submission time.
//
// The readers follow protobuf's decoding rules, so that a hand-read message means what
// the generated code would make of it: unknown fields are skipped, a repeated scalar
// keeps its last value, a repeated message merges, a known field number with another
// wire type is an unknown field, a string must be UTF-8 where the reader reads it, and
// a field number above protowire.MaxValidNumber is refused (ConsumeTag). Each reader is
// checked against proto.Unmarshal by a test or a fuzz target: FuzzEachDelivery here,
// FuzzReadEvent and FuzzReplicateBytes in pkg/fanout (through the node's limits).
//
// Field numbers. fields.go names every field number the package uses, after its
// message and field (EventTaskID is fanout.v1.Event.task_id). TestFieldNumbers looks
// each up in the generated descriptors and checks its number and type; it fails for a
// constant without a row in its table, and TestNoLiteralFieldNumbers fails for a field
// number written as a literal. Changing a field in proto/ without changing this
// package fails the tests.
//
// What is not here: the frame codec, which passes a message's bytes through gRPC, is
// internal/frame's (Frame, ServerOption, DialOption), an option of the sidecar's
// own servers and connections. Limits are pkg/fanout's: this package reads, the node
// decides.
package wire
