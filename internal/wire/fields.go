package wire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of the messages this package reads and writes by hand, named
// <Message><Field> after proto/fanout/v1/*.proto and google/protobuf's well-known
// types. They are the only field numbers in the package: TestFieldNumbers checks each
// against the generated descriptors (number, and how it is encoded), and fails for a
// constant it has no row for.
const (
	// fanout.v1.ReplicateRequest
	ReplicateRequestOriginNode           protowire.Number = 1 // string
	ReplicateRequestEvents               protowire.Number = 2 // repeated Event
	ReplicateRequestSubmittedAtUnixNanos protowire.Number = 3 // repeated int64, packed

	// fanout.v1.ReplicateStreamRequest
	ReplicateStreamRequestSeq   protowire.Number = 1 // uint64
	ReplicateStreamRequestBatch protowire.Number = 2 // ReplicateRequest
	ReplicateStreamRequestHold  protowire.Number = 3 // uint32 (answer_hold_micros)

	// fanout.v1.SubmitRequest
	SubmitRequestEvents     protowire.Number = 1 // repeated Event
	SubmitRequestAck        protowire.Number = 2 // AckPolicy
	SubmitRequestAckTimeout protowire.Number = 3 // google.protobuf.Duration
	SubmitRequestRequestID  protowire.Number = 4 // uint64
	SubmitRequestWindow     protowire.Number = 5 // bool (window_answers)
	SubmitRequestHold       protowire.Number = 6 // uint32 (answer_hold_micros)

	// fanout.v1.SubmitResponse
	SubmitResponseRequestID  protowire.Number = 1 // uint64
	SubmitResponseVersions   protowire.Number = 2 // repeated uint64, packed
	SubmitResponsePeerAcks   protowire.Number = 3 // repeated PeerAck
	SubmitResponseSatisfied  protowire.Number = 4 // bool
	SubmitResponseResults    protowire.Number = 5 // repeated EventResult
	SubmitResponseRequestIDs protowire.Number = 6 // repeated uint64, packed

	// fanout.v1.EventResult
	EventResultOutcome        protowire.Number = 1 // EventOutcome
	EventResultRevision       protowire.Number = 2 // uint64
	EventResultCurrentVersion protowire.Number = 3 // uint64
	EventResultCurrentOrigin  protowire.Number = 4 // string
	EventResultDetail         protowire.Number = 5 // string

	// fanout.v1.PeerAck
	PeerAckPeer   protowire.Number = 1 // string
	PeerAckState  protowire.Number = 2 // PeerAckState
	PeerAckDetail protowire.Number = 3 // string

	// fanout.v1.Event
	EventTaskID     protowire.Number = 1 // string
	EventPayload    protowire.Number = 2 // bytes
	EventAttributes protowire.Number = 3 // map<string, string>
	EventVersion    protowire.Number = 4 // uint64
	EventTTL        protowire.Number = 5 // google.protobuf.Duration
	EventDeleted    protowire.Number = 6 // bool

	// fanout.v1.Event.AttributesEntry, one entry of the attributes map
	AttributesEntryKey   protowire.Number = 1 // string
	AttributesEntryValue protowire.Number = 2 // string

	// fanout.v1.SubscribeResponse. Its fields event, origin_node, submitted_at and
	// revision have Entry's numbers and types: AppendEntry writes either.
	SubscribeResponseEvent            protowire.Number = 1 // Event
	SubscribeResponseOriginNode       protowire.Number = 2 // string
	SubscribeResponseSubmittedAt      protowire.Number = 3 // google.protobuf.Timestamp
	SubscribeResponseRevision         protowire.Number = 5 // uint64
	SubscribeResponseBatch            protowire.Number = 6 // repeated Entry
	SubscribeResponseSnapshotComplete protowire.Number = 7 // bool

	// fanout.v1.Entry
	EntryEvent       protowire.Number = 1 // Event
	EntryOriginNode  protowire.Number = 2 // string
	EntrySubmittedAt protowire.Number = 3 // google.protobuf.Timestamp
	EntryRevision    protowire.Number = 5 // uint64

	// google.protobuf.Timestamp and google.protobuf.Duration: the same two fields,
	// which ReadSecondsNanos reads for either.
	TimestampSeconds protowire.Number = 1 // int64
	TimestampNanos   protowire.Number = 2 // int32
	DurationSeconds  protowire.Number = 1 // int64
	DurationNanos    protowire.Number = 2 // int32
)
