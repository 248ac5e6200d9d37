package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// maxEventBytes is the --max-event-bytes of TestBadInput's nodes.
const maxEventBytes = 1024

// badRequest is a case of TestBadInput: a request whose events are all valid except
// the one at index bad (if bad >= 0), broken by breakEvent, or broken as a whole by
// breakRequest.
type badRequest struct {
	name         string
	events       int // events in the request
	bad          int
	breakEvent   func(*fanoutv1.Event)
	breakRequest func(*fanoutv1.SubmitRequest)
	wantField    string // the status message names this
}

func badRequests() []badRequest {
	manyAttrs := make(map[string]string)
	for i := range 65 {
		manyAttrs[fmt.Sprintf("k%d", i)] = "v"
	}
	return []badRequest{
		{name: "empty task_id", events: 5, bad: 3, breakEvent: func(e *fanoutv1.Event) { e.TaskId = "" }, wantField: "events[3].task_id"},
		{name: "task_id over 1024 bytes", events: 2, bad: 1, breakEvent: func(e *fanoutv1.Event) { e.TaskId = strings.Repeat("t", 1025) }, wantField: "events[1].task_id"},
		{name: "payload over max-event-bytes", events: 3, bad: 1, breakEvent: func(e *fanoutv1.Event) { e.Payload = make([]byte, maxEventBytes+1) }, wantField: "events[1].payload"},
		{name: "negative ttl", events: 3, bad: 2, breakEvent: func(e *fanoutv1.Event) { e.Ttl = durationpb.New(-time.Second) }, wantField: "events[2].ttl"},
		{name: "65 attributes", events: 2, bad: 1, breakEvent: func(e *fanoutv1.Event) { e.Attributes = manyAttrs }, wantField: "events[1].attributes"},
		{name: "attributes over 16 KiB", events: 2, bad: 1, breakEvent: func(e *fanoutv1.Event) { e.Attributes = map[string]string{"k": strings.Repeat("v", 16<<10)} }, wantField: "events[1].attributes"},
		{name: "negative ack_timeout", events: 2, bad: -1, breakRequest: func(r *fanoutv1.SubmitRequest) { r.AckTimeout = durationpb.New(-time.Second) }, wantField: "ack_timeout"},
		{name: "10001 events", events: 10001, bad: -1, wantField: "events: "},
	}
}

// build returns the request; its valid task ids are prefix+"ok/<index>".
func (b badRequest) build(prefix string) *fanoutv1.SubmitRequest {
	req := &fanoutv1.SubmitRequest{RequestId: 7}
	for i := range b.events {
		req.Events = append(req.Events, &fanoutv1.Event{TaskId: fmt.Sprintf("%sok/%d", prefix, i), Payload: []byte("must not be delivered")})
	}
	if b.bad >= 0 {
		b.breakEvent(req.Events[b.bad])
	}
	if b.breakRequest != nil {
		b.breakRequest(req)
	}
	return req
}

// TestBadInput sends invalid requests through Submit and SubmitStream. Each must be
// rejected with INVALID_ARGUMENT naming the field and index, and none of its valid
// events may be queued or delivered (validate first, then accept all).
func TestBadInput(t *testing.T) {
	c := startCluster(t, specs(2, fmt.Sprintf("--max-event-bytes=%d", maxEventBytes))...)
	recB := subscribe(t, c, 1, "bad/")
	vias := []struct {
		name string
		send func(fanoutv1.FanoutServiceClient, *fanoutv1.SubmitRequest) error
	}{
		{"Submit", sendUnary},
		{"SubmitStream", sendOnStream},
	}
	for _, via := range vias {
		for _, tc := range badRequests() {
			t.Run(via.name+"/"+tc.name, func(t *testing.T) {
				err := via.send(c.client(0), tc.build(fmt.Sprintf("bad/%s/%s/", via.name, tc.name)))
				st := status.Convert(err)
				if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.wantField) {
					t.Errorf("got %v, want INVALID_ARGUMENT naming %q", err, tc.wantField)
				}
			})
		}
	}

	// A marker sent after every rejected request reaches B; by then A's queue for B
	// is empty, and A must have queued the marker alone.
	exp := newExpectations()
	submit(t, c, 0, event("bad/marker", "marker"), exp)
	waitLatest(t, convergeTimeout, exp.snapshot(), recB)
	eventually(t, convergeTimeout, "A's queue for B is empty", func() error {
		p, err := c.node(0).peerStatus(1)
		if err == nil && p.GetPending()+p.GetInFlight()+p.GetAcceptorQueue()+p.GetReprocessQueue() > 0 {
			err = fmt.Errorf("peer B: pending %d, in flight %d", p.GetPending(), p.GetInFlight())
		}
		return err
	})
	if p, err := c.node(0).peerStatus(1); err != nil || p.GetAccepted() != 1 {
		t.Errorf("A accepted %d events for B (err %v), want 1: the marker only", p.GetAccepted(), err)
	}
	if got := recB.deliveries(); len(got) != 1 {
		t.Errorf("B delivered %d events, want only the marker; first: %q", len(got), got[0].TaskID)
	}
}

func sendUnary(cli fanoutv1.FanoutServiceClient, req *fanoutv1.SubmitRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	_, err := cli.Submit(ctx, req)
	return err
}

// sendOnStream sends req on a new SubmitStream and returns the status it ends with.
func sendOnStream(cli fanoutv1.FanoutServiceClient, req *fanoutv1.SubmitRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	stream, err := cli.SubmitStream(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	resp, err := stream.Recv()
	if err == nil {
		return fmt.Errorf("stream accepted the request: %v", resp)
	}
	return err
}

// TestGarbageOnListeners writes junk to both listeners of a node, raw and inside
// HTTP/2 and gRPC framing. The node must stay up and healthy, and still replicate.
func TestGarbageOnListeners(t *testing.T) {
	c := startCluster(t, specs(2)...)
	a := c.node(0)
	listeners := []struct{ name, addr string }{{"app", a.appAddr}, {"peer", a.peerAddr}}
	for _, l := range listeners {
		for _, g := range garbage() {
			t.Run(l.name+"/"+g.name, func(t *testing.T) {
				sendRaw(t, l.addr, g.bytes)
				checkHealthy(t, a, l.addr)
			})
		}
	}
	for _, tc := range wrongMessages(a) {
		t.Run("wrong message/"+tc.name, func(t *testing.T) {
			err := tc.call()
			t.Logf("answer: %v", err)
			if code := status.Code(err); code == codes.OK || code == codes.Unknown {
				t.Errorf("got %v, want a definite error status", err)
			} else if tc.want != codes.OK && code != tc.want {
				t.Errorf("got %v, want %s", err, tc.want)
			}
			checkHealthy(t, a, a.peerAddr)
		})
	}

	recB := subscribe(t, c, 1, "after-garbage/")
	exp := newExpectations()
	submit(t, c, 0, event("after-garbage/x", "still works"), exp)
	waitLatest(t, convergeTimeout, exp.snapshot(), recB)
}

type rawInput struct {
	name  string
	bytes []byte
}

const h2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2Frame is one HTTP/2 frame: a 9-byte header (length, type, flags, stream) and
// payload. length is what the header claims, which may differ from len(payload).
func h2Frame(length int, typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(length >> 16), byte(length >> 8), byte(length), typ, flags}
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

func garbage() []rawInput {
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(rng.UintN(256))
	}
	settings := h2Frame(0, 0x4, 0, 0, nil)
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	return []rawInput{
		{"random bytes", junk},
		{"HTTP/1.1 request", []byte("GET /fanout.v1.FanoutService/Submit HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"HTTP/2 preface then junk", cat([]byte(h2Preface), junk)},
		{"HTTP/2 truncated DATA frame", cat([]byte(h2Preface), settings, h2Frame(1000, 0x0, 0, 1, junk[:5]))},
		{"HTTP/2 HEADERS with junk HPACK", cat([]byte(h2Preface), settings, h2Frame(64, 0x1, 0x4, 1, junk[:64]))},
		{"HTTP/2 huge frame length", cat([]byte(h2Preface), settings, h2Frame(1<<24-1, 0x0, 0, 1, junk))},
	}
}

// sendRaw writes b to addr, half-closes, and reads whatever the server answers until
// it closes the connection (or a deadline passes).
func sendRaw(t *testing.T, addr string, b []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write(b); err != nil {
		t.Logf("write: %v (the server may close early)", err)
	}
	conn.(*net.TCPConn).CloseWrite() // a truncated frame stays truncated
	io.Copy(io.Discard, conn)        // until the server closes, resets, or the deadline
}

// checkHealthy fails the test unless n's process is running and the health service
// on addr answers SERVING.
func checkHealthy(t *testing.T, n *node, addr string) {
	t.Helper()
	if !n.running() {
		t.Fatalf("node %s exited: %s", n.spec.ID, n.cmd.ProcessState)
	}
	cc := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health on %s: %v %v, want SERVING", addr, resp.GetStatus(), err)
	}
}

// dial returns a plaintext client connection closed at the end of the test.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := dialFast(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// rawCodec sends and receives message bytes as they are, so a test can send what is
// not a valid protobuf message.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" } // what the server expects on the wire

type wrongMessage struct {
	name string
	call func() error
	want codes.Code // codes.OK: any definite error status
}

func wrongMessages(a *node) []wrongMessage {
	invoke := func(addr, method string, body []byte) func() error {
		return func() error {
			cc, err := dialFast(addr)
			if err != nil {
				return err
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out []byte
			return cc.Invoke(ctx, method, &body, &out, grpc.ForceCodec(rawCodec{}))
		}
	}
	replicate := func(req *fanoutv1.ReplicateRequest) func() error {
		return func() error {
			cc, err := dialFast(a.peerAddr)
			if err != nil {
				return err
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = fanoutv1.NewPeerServiceClient(cc).Replicate(ctx, req)
			return err
		}
	}
	junk := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x80}
	badUTF8 := []byte{0x0a, 0x05, 0x0a, 0x03, 0xff, 0xfe, 0xfd} // events[0].task_id = "\xff\xfe\xfd"
	return []wrongMessage{
		{name: "junk Replicate body", call: invoke(a.peerAddr, "/fanout.v1.PeerService/Replicate", junk), want: codes.InvalidArgument},
		{name: "junk Submit body", call: invoke(a.appAddr, "/fanout.v1.FanoutService/Submit", junk)},
		{name: "Submit with non-UTF-8 task_id", call: invoke(a.appAddr, "/fanout.v1.FanoutService/Submit", badUTF8)},
		{name: "unknown method on peer port", call: invoke(a.peerAddr, "/fanout.v1.PeerService/Nope", nil), want: codes.Unimplemented},
		{name: "FanoutService on peer port", call: invoke(a.peerAddr, "/fanout.v1.FanoutService/Submit", nil), want: codes.Unimplemented},
		{name: "Replicate without origin_node", call: replicate(&fanoutv1.ReplicateRequest{Events: []*fanoutv1.Event{{TaskId: "x", Version: 1}}}), want: codes.InvalidArgument},
	}
}
