// Package event is the one reader-validator of the events and Submit requests a node
// takes: it reads them from their bytes (internal/wire) and holds them to the Limits,
// without decoding them, and on a refusal names the field and why ("events[3].task_id:
// empty") from what it read, without reading the bytes again.
//
// The app listener reads a SubmitRequest with ReadSubmit: its framing, each event's,
// the request's fields, each event's fields and its size as it will be stored, in that
// order. The peer listener and anti-entropy read each event with ReadEvent, which
// applies the same rules to the event as it arrived and answers only yes or no (an
// INVALID item). The node adds what depends on its state: the bound on a version
// given by the app or a peer (its clock).
//
// It is a package of its own, not internal/wire, because wire is the encoding (field
// numbers, protobuf's decoding rules) and knows no product limits, while this is the
// product's input contract: the limits, the rules and the words of their errors. And
// it is not the node's: any transport that takes events (the mesh's peers today, a
// broker's feed next) holds them to the same rules through it.
//
// The rules are protobuf's where protobuf has them: the reader accepts exactly what
// proto.Unmarshal accepts (UTF-8 strings, the last of a repeated scalar, merged
// repeated messages, unknown fields skipped), and a ttl or ack_timeout is valid
// exactly when durationpb's CheckValid accepts it and AsDuration is not negative
// (nonNegativeDuration says why its test is that rule). FuzzReadSubmit and
// FuzzReadEvent compare the reader with proto.Unmarshal into the generated types plus
// the rules written on the decoded message, so that it cannot drift from them.
package event
