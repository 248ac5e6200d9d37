package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinels to test errors with errors.Is. An *Error of a call matches the one of its
// gRPC code; a *ResultError the one of its event's outcome.
var (
	// ErrInvalid: the sidecar (or the client, before sending) refused the request
	// (INVALID_ARGUMENT, naming the field).
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: no sidecar answers at the address, or it is draining
	// (UNAVAILABLE); retry later.
	ErrUnavailable = errors.New("sidecar unavailable")
	// ErrUnauthenticated: the sidecar wants the token of its --app-token-file
	// (WithToken, WithTokenFile), or a different one.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrOutOfRange: a Subscribe could not resume from its revision (Watch handles it).
	ErrOutOfRange = errors.New("revision out of range")
	// ErrTooLarge: a request over the sidecar's --max-request-bytes
	// (RESOURCE_EXHAUSTED).
	ErrTooLarge = errors.New("resource exhausted")
	// ErrStale: the sidecar holds this version of the key or a newer one; the event
	// was neither stored nor sent (Result.CurrentVersion, CurrentOrigin).
	ErrStale = errors.New("stale")
	// ErrRefused: the state table is at a bound (--state-max-keys, --state-max-bytes);
	// nothing was stored (Result.Detail says which).
	ErrRefused = errors.New("refused")
	// ErrNotSatisfied: the event was accepted and sent, but the ack policy was not met
	// within the ack timeout (Result.PeerAcks says which peer did not acknowledge).
	ErrNotSatisfied = errors.New("ack policy not satisfied")
	// ErrClosed: the Publisher (or Watch) was closed.
	ErrClosed = errors.New("closed")
)

// codes used for errors the client makes itself.
const (
	codeInvalid  = codes.InvalidArgument
	codeInternal = codes.Internal
)

// Error is a failed call: the operation, the key (if one), and the gRPC status.
// status.FromError and status.Code see its status; errors.Is matches the sentinel of
// its code (ErrInvalid, ErrUnavailable, ...) and context.Canceled or
// context.DeadlineExceeded for those codes.
type Error struct {
	Op   string // "put", "delete", "get", "list", "watch", "publish", "status"
	Key  string // the key or prefix, if the call had one
	Code codes.Code
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("fanout ")
	b.WriteString(e.Op)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	fmt.Fprintf(&b, ": %s: %s", codeName(e.Code), e.Msg)
	switch e.Code {
	case codes.Unavailable:
		b.WriteString(" (is a sidecar serving on this address?)")
	case codes.Unauthenticated:
		b.WriteString(" (pass the sidecar's --app-token-file content: client.WithToken or WithTokenFile)")
	}
	return b.String()
}

// GRPCStatus lets status.FromError and status.Code read the status.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Msg) }

// Is matches the sentinel of the code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInvalid:
		return e.Code == codes.InvalidArgument
	case ErrUnavailable:
		return e.Code == codes.Unavailable
	case ErrUnauthenticated:
		return e.Code == codes.Unauthenticated
	case ErrOutOfRange:
		return e.Code == codes.OutOfRange
	case ErrTooLarge:
		return e.Code == codes.ResourceExhausted
	}
	return false
}

// Unwrap gives context.Canceled and context.DeadlineExceeded for those codes.
func (e *Error) Unwrap() error {
	switch e.Code {
	case codes.Canceled:
		return context.Canceled
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	}
	return nil
}

// wrap turns a gRPC error into an *Error (nil stays nil).
func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st := status.Convert(err)
	return &Error{Op: op, Key: key, Code: st.Code(), Msg: st.Message()}
}

// codeNames are the canonical names of the gRPC codes (grpc-status's, grpcurl's).
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// CodeName is c's canonical name, as grpc-status and grpcurl write it (OUT_OF_RANGE,
// UNAVAILABLE), for messages and logs.
func CodeName(c codes.Code) string { return codeName(c) }

func codeName(c codes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE_%d", uint32(c))
}

// Outcome is what the sidecar did with one event.
type Outcome int32

const (
	// Accepted: stored as the key's latest state and fanned out.
	Accepted = Outcome(fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED)
	// Stale: the sidecar holds this version or a newer one; neither stored nor sent.
	Stale = Outcome(fanoutv1.EventOutcome_EVENT_OUTCOME_STALE)
	// Refused: the state table is at a bound; nothing stored or sent.
	Refused = Outcome(fanoutv1.EventOutcome_EVENT_OUTCOME_REFUSED)
)

func (o Outcome) String() string { return fanoutv1.EventOutcome(o).String() }

// PeerAck is one peer's acknowledgement of a request (ack policies other than
// Queued).
type PeerAck struct {
	Peer   string // the peer's address
	State  fanoutv1.PeerAckState
	Detail string
}

// Result is what the sidecar did with one event of a Put, Delete or Publisher.Put.
type Result struct {
	Outcome Outcome
	// Version is the event's version (assigned by the sidecar if none was given).
	Version uint64
	// Revision is the sidecar's revision of the change (Accepted only).
	Revision uint64
	// CurrentVersion and CurrentOrigin are the entry that won (Stale only).
	CurrentVersion uint64
	CurrentOrigin  string
	// Detail explains Refused.
	Detail string
	// Satisfied: the request's ack policy was met. For a Publisher it is the batch's:
	// the request this event went in.
	Satisfied bool
	// PeerAcks has one entry per peer when the policy waits for peers (the request's,
	// shared by the events of a Publisher batch).
	PeerAcks []PeerAck
}

// results maps a SubmitResponse onto one Result per event.
func results(resp *fanoutv1.SubmitResponse) []Result {
	acks := make([]PeerAck, 0, len(resp.GetPeerAcks()))
	for _, a := range resp.GetPeerAcks() {
		acks = append(acks, PeerAck{Peer: a.GetPeer(), State: a.GetState(), Detail: a.GetDetail()})
	}
	rs := make([]Result, len(resp.GetResults()))
	for i, r := range resp.GetResults() {
		rs[i] = Result{
			Outcome: Outcome(r.GetOutcome()), Revision: r.GetRevision(),
			CurrentVersion: r.GetCurrentVersion(), CurrentOrigin: r.GetCurrentOrigin(), Detail: r.GetDetail(),
			Satisfied: resp.GetSatisfied(), PeerAcks: acks,
		}
		if i < len(resp.GetVersions()) {
			rs[i].Version = resp.GetVersions()[i]
		}
	}
	return rs
}

// err is nil for an accepted event whose policy was met, else a *ResultError.
func (r Result) err(op, key string) error {
	switch {
	case r.Outcome == Stale:
		return &ResultError{Op: op, Key: key, Result: r, kind: ErrStale}
	case r.Outcome == Refused:
		return &ResultError{Op: op, Key: key, Result: r, kind: ErrRefused}
	case r.Outcome != Accepted:
		return &ResultError{Op: op, Key: key, Result: r, kind: fmt.Errorf("outcome %s", r.Outcome)}
	case !r.Satisfied:
		return &ResultError{Op: op, Key: key, Result: r, kind: ErrNotSatisfied}
	}
	return nil
}

// ResultError is an event the sidecar answered, but not as asked: STALE, REFUSED, or
// accepted without its ack policy met. errors.Is matches ErrStale, ErrRefused or
// ErrNotSatisfied.
type ResultError struct {
	Op, Key string
	Result  Result
	kind    error
}

func (e *ResultError) Error() string {
	r := e.Result
	msg := fmt.Sprintf("fanout %s %q: %v", e.Op, e.Key, e.kind)
	switch e.kind {
	case ErrStale:
		msg += fmt.Sprintf(": the sidecar holds version %d from %s (this event's: %d)", r.CurrentVersion, r.CurrentOrigin, r.Version)
	case ErrRefused:
		msg += ": " + r.Detail
	case ErrNotSatisfied:
		var parts []string
		for _, a := range r.PeerAcks {
			p := a.Peer + " " + a.State.String()
			if a.Detail != "" {
				p += " (" + a.Detail + ")"
			}
			parts = append(parts, p)
		}
		msg += ": " + strings.Join(parts, ", ")
	}
	return msg
}

func (e *ResultError) Unwrap() error { return e.kind }

// validKey checks what the sidecar checks of a task_id, so that a Publisher's batch is
// never refused whole for one bad key.
func validKey(key string) error {
	switch {
	case key == "":
		return errors.New("key: empty")
	case len(key) > 1024:
		return fmt.Errorf("key: %d bytes, at most 1024", len(key))
	case !utf8.ValidString(key):
		return errors.New("key: not valid UTF-8")
	}
	return nil
}
