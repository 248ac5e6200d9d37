package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func accepted(version, revision uint64) *fanoutv1.SubmitResponse {
	return &fanoutv1.SubmitResponse{
		Versions:  []uint64{version},
		Satisfied: true,
		Results:   []*fanoutv1.EventResult{{Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED, Revision: revision}},
	}
}

// TestSubmitRequest checks the SubmitRequest each combination of arguments, flags and
// FANOUT_* variables sends.
func TestSubmitRequest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "payload.bin")
	if err := os.WriteFile(file, []byte{0, 1, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	event := func(ev *fanoutv1.Event) *fanoutv1.SubmitRequest {
		return &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{ev}}
	}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		env   map[string]string
		want  *fanoutv1.SubmitRequest
	}{
		{"text payload", []string{"register#x", "hello world"}, "", nil,
			event(&fanoutv1.Event{TaskId: "register#x", Payload: []byte("hello world")})},
		{"no payload", []string{"register#x"}, "", nil,
			event(&fanoutv1.Event{TaskId: "register#x"})},
		{"payload file, binary", []string{"register#x", "--payload-file", file}, "", nil,
			event(&fanoutv1.Event{TaskId: "register#x", Payload: []byte{0, 1, 0xff}})},
		{"payload from stdin", []string{"register#x", "--payload-file", "-"}, "\x00from stdin\n", nil,
			event(&fanoutv1.Event{TaskId: "register#x", Payload: []byte("\x00from stdin\n")})},
		{"delete", []string{"register#x", "--delete", "--version", "12"}, "", nil,
			event(&fanoutv1.Event{TaskId: "register#x", Deleted: true, Version: 12})},
		{"every event flag", []string{"register#x", "v", "--version", "7", "--attr", "zone=eu-1", "--attr", "expr=a=b", "--ttl", "30s"}, "", nil,
			event(&fanoutv1.Event{TaskId: "register#x", Payload: []byte("v"), Version: 7, Ttl: durationpb.New(30 * time.Second),
				Attributes: map[string]string{"zone": "eu-1", "expr": "a=b"}})},
		{"ack policy and timeout", []string{"register#x", "v", "--ack", "QUORUM", "--ack-timeout", "2s"}, "", nil,
			&fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "register#x", Payload: []byte("v")}},
				Ack: fanoutv1.AckPolicy_ACK_POLICY_QUORUM, AckTimeout: durationpb.New(2 * time.Second)}},
		{"FANOUT_* other than FANOUT_ADDR are serve's, not submit's", []string{"register#x", "v", "--ack", "one"}, "", map[string]string{"FANOUT_ACK": "all", "FANOUT_VERSION": "9", "FANOUT_ATTR": "k=v"},
			&fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{{TaskId: "register#x", Payload: []byte("v")}},
				Ack: fanoutv1.AckPolicy_ACK_POLICY_ONE}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			f := &fakeApp{submit: accepted(7, 1)}
			addr := f.start(t, "")
			_, _, err := runCLI(testContext(t), append([]string{"submit", "--addr", addr}, tc.args...), tc.stdin)
			checkErr(t, err, "")
			checkRequests(t, f.requests(), tc.want)
		})
	}
}

// TestSubmitOutput checks what submit prints for each kind of answer, and which
// answers make it fail.
func TestSubmitOutput(t *testing.T) {
	ackedQuorum := accepted(117655171390570496, 42)
	ackedQuorum.PeerAcks = []*fanoutv1.PeerAck{
		{Peer: "10.0.0.2:7071", State: fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED},
		{Peer: "10.0.0.3:7071", State: fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED, Detail: "overflow"},
	}
	unsatisfied := accepted(5, 43)
	unsatisfied.Satisfied = false
	unsatisfied.PeerAcks = []*fanoutv1.PeerAck{
		{Peer: "10.0.0.2:7071", State: fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED},
		{Peer: "10.0.0.3:7071", State: fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING},
		{Peer: "10.0.0.4:7071", State: fanoutv1.PeerAckState_PEER_ACK_STATE_FAILED, Detail: "circuit breaker open"},
	}
	stale := &fanoutv1.SubmitResponse{Versions: []uint64{3}, Satisfied: true, Results: []*fanoutv1.EventResult{{
		Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_STALE, CurrentVersion: 9, CurrentOrigin: "node-b"}}}
	refused := &fanoutv1.SubmitResponse{Versions: []uint64{3}, Satisfied: true, Results: []*fanoutv1.EventResult{{
		Outcome: fanoutv1.EventOutcome_EVENT_OUTCOME_REFUSED, Detail: "state table full: 1000000 keys (--state-max-keys)"}}}
	noResults := &fanoutv1.SubmitResponse{Versions: []uint64{8}, Satisfied: true}
	for _, tc := range []struct {
		name    string
		resp    *fanoutv1.SubmitResponse
		err     error
		flags   []string
		wantOut string
		wantErr string
	}{
		{"accepted", accepted(117655171390570496, 42), nil, nil,
			"accepted register#x version 117655171390570496 revision 42\n", ""},
		{"accepted with acks", ackedQuorum, nil, []string{"--ack", "quorum"},
			"accepted register#x version 117655171390570496 revision 42\npeer 10.0.0.2:7071: ACKED\npeer 10.0.0.3:7071: DROPPED (overflow)\n", ""},
		{"ack policy not satisfied", unsatisfied, nil, []string{"--ack", "all"},
			"accepted register#x version 5 revision 43\npeer 10.0.0.2:7071: ACKED\npeer 10.0.0.3:7071: PENDING\npeer 10.0.0.4:7071: FAILED (circuit breaker open)\n",
			"register#x was accepted but --ack all was not satisfied: 1 of 3 peers acknowledged (raise --ack-timeout"},
		{"stale", stale, nil, nil, "", "stale register#x: node holds version 9 from node-b (to replace it, submit a higher --version"},
		{"refused", refused, nil, nil, "", "refused register#x: state table full: 1000000 keys (--state-max-keys)"},
		{"sidecar without results", noResults, nil, nil, "accepted register#x version 8\n", ""},
		{"json", accepted(117655171390570496, 42), nil, []string{"--json"},
			`{"versions":["117655171390570496"],"satisfied":true,"results":[{"outcome":"EVENT_OUTCOME_ACCEPTED","revision":"42"}]}` + "\n", ""},
		{"json, stale", stale, nil, []string{"--json"},
			`{"versions":["3"],"satisfied":true,"results":[{"outcome":"EVENT_OUTCOME_STALE","currentVersion":"9","currentOrigin":"node-b"}]}` + "\n",
			"stale register#x: node holds version 9 from node-b"},
		{"grpc error", nil, status.Error(codes.InvalidArgument, "events[0].attributes: more than 64"), nil,
			"", ": INVALID_ARGUMENT: events[0].attributes: more than 64"},
		{"deadline", nil, status.Error(codes.DeadlineExceeded, "context deadline exceeded"), []string{"--timeout", "3s"},
			"", ": DEADLINE_EXCEEDED: context deadline exceeded (--timeout 3s passed: raise it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeApp{submit: tc.resp, err: tc.err}
			addr := f.start(t, "")
			out, _, err := runCLI(testContext(t), append([]string{"submit", "--addr", addr, "register#x", "v"}, tc.flags...), "")
			checkErr(t, err, tc.wantErr)
			if out != tc.wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, tc.wantOut)
			}
			if err != nil && strings.Contains(err.Error(), "rpc error") {
				t.Errorf("err = %v: a gRPC error must read CODE: message", err)
			}
		})
	}
}

// TestSubmitFlagErrors checks that a bad command line names what to fix and sends
// nothing.
func TestSubmitFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no task id", nil, "want TASK_ID [PAYLOAD], got 0 arguments"},
		{"unquoted payload", []string{"register#x", "hello", "world"}, "want TASK_ID [PAYLOAD], got 3 arguments (quote a payload with spaces)"},
		{"payload twice", []string{"register#x", "v", "--payload-file", "f"}, "either as the PAYLOAD argument or with --payload-file"},
		{"delete with payload", []string{"register#x", "v", "--delete"}, "--delete sends a tombstone, which has no payload"},
		{"missing payload file", []string{"register#x", "--payload-file", "/nonexistent/p"}, "--payload-file: open /nonexistent/p"},
		{"bad ack", []string{"register#x", "--ack", "most"}, `--ack "most": want queued, one, quorum or all`},
		{"bad attr", []string{"register#x", "--attr", "zone"}, `--attr "zone": want key=value`},
		{"negative ttl", []string{"register#x", "--ttl", "-1s"}, "--ttl -1s: must not be negative"},
		{"negative ack timeout", []string{"register#x", "--ack-timeout", "-1s"}, "--ack-timeout -1s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeApp{submit: accepted(1, 1)}
			addr := f.start(t, "")
			_, _, err := runCLI(testContext(t), append([]string{"submit", "--addr", addr}, tc.args...), "")
			checkErr(t, err, tc.want)
			checkRequests(t, f.requests())
		})
	}
}
