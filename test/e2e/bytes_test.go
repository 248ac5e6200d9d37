package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Every byte bounded (issue 12, item 4): what a message, an event and a peer's queue
// may take, and what happens past each bound.

const (
	// hugeBytes is the message a reviewer sent: 300 MiB, then accepted by a node whose
	// limit was 1 GiB (its RSS went to 1.37 GiB).
	hugeBytes = 300 << 20
	// rssCeiling is the most a node's peak RSS (VmHWM) may reach while it refuses
	// huge messages: an idle node takes ~20 MiB (~60 MiB with -race), and one
	// message of the 300 MiB, or two decoded copies of it, would pass this.
	rssCeiling = 160 << 20
	// refuseWithin is how long a refusal of a huge message may take: gRPC refuses it
	// from its 5-byte header, before reading the rest.
	refuseWithin = 10 * time.Second
)

// memory returns the current and the peak resident set size of n's process
// (/proc/<pid>/status VmRSS and VmHWM), in bytes.
func (n *node) memory() (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	field := func(name string) int64 {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, name+":"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				return kb << 10
			}
		}
		return -1
	}
	rss, peak = field("VmRSS"), field("VmHWM")
	if rss < 0 || peak < 0 {
		return 0, 0, fmt.Errorf("no VmRSS or VmHWM in /proc/%d/status", n.cmd.Process.Pid)
	}
	return rss, peak, nil
}

// rawBody is one buffer for request bodies that end in the same big payload: each
// body is written in front of the payload, into room left at the front, so that one
// 300 MiB allocation serves every request of a test.
type rawBody struct {
	buf  []byte
	room int // bytes before the payload
}

func newRawBody(payloadBytes int) *rawBody {
	const room = 4096
	return &rawBody{buf: make([]byte, room+payloadBytes), room: room}
}

// with returns a request body: head (the request's first fields), then field num
// holding an Event of eventHead (its first fields) and the big payload.
func (r *rawBody) with(head []byte, num protowire.Number, eventHead []byte) []byte {
	n := len(r.buf) - r.room
	payload := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), uint64(n))
	front := protowire.AppendTag(append([]byte(nil), head...), num, protowire.BytesType)
	front = protowire.AppendVarint(front, uint64(len(eventHead)+len(payload)+n))
	front = append(append(front, eventHead...), payload...)
	start := r.room - len(front)
	copy(r.buf[start:], front)
	return r.buf[start:]
}

// TestRawBody: the bodies rawBody writes decode as the requests they stand for.
func TestRawBody(t *testing.T) {
	body := newRawBody(10)
	evHead := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k")
	var sub fanoutv1.SubmitRequest
	if err := proto.Unmarshal(body.with(nil, 1, evHead), &sub); err != nil || len(sub.Events) != 1 ||
		sub.Events[0].TaskId != "k" || len(sub.Events[0].Payload) != 10 {
		t.Fatalf("Submit body: %v, %v", &sub, err)
	}
	origin := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "X")
	var rep fanoutv1.ReplicateRequest
	if err := proto.Unmarshal(body.with(origin, 2, evHead), &rep); err != nil || rep.OriginNode != "X" || len(rep.Events) != 1 ||
		rep.Events[0].TaskId != "k" || len(rep.Events[0].Payload) != 10 {
		t.Fatalf("Replicate body: %v, %v", &rep, err)
	}
}

// TestHugeMessagesRefused sends a 300 MiB Submit to a node's app listener and a
// 300 MiB Replicate to its peer listener. gRPC refuses each with RESOURCE_EXHAUSTED,
// within seconds, before decoding it; the node's peak RSS stays under rssCeiling, and
// it goes on replicating.
func TestHugeMessagesRefused(t *testing.T) {
	c := startCluster(t, specs(2)...)
	a := c.node(0)
	body := newRawBody(hugeBytes)
	evHead := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "huge/1") // task_id
	evHead = protowire.AppendVarint(protowire.AppendTag(evHead, 4, protowire.VarintType), 1)     // version
	origin := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "X")      // origin_node
	for _, tc := range []struct {
		name, addr, method string
		body               func() []byte
	}{
		// SubmitRequest{events: [Event{task_id, version, payload: 300 MiB}]}
		{"app listener, Submit", a.appAddr, fanoutv1.FanoutService_Submit_FullMethodName, func() []byte { return body.with(nil, 1, evHead) }},
		// ReplicateRequest{origin_node, events: [Event{…, payload: 300 MiB}]}
		{"peer listener, Replicate", a.peerAddr, fanoutv1.PeerService_Replicate_FullMethodName, func() []byte { return body.with(origin, 2, evHead) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.body()
			cc := dial(t, tc.addr)
			ctx, cancel := context.WithTimeout(context.Background(), 2*refuseWithin)
			defer cancel()
			start := time.Now()
			var out []byte
			err := cc.Invoke(ctx, tc.method, &req, &out, grpc.ForceCodec(rawCodec{}))
			took := time.Since(start)
			st := status.Convert(err)
			t.Logf("%d bytes refused in %s: %v", len(req), took, err)
			if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") {
				t.Fatalf("got %v, want RESOURCE_EXHAUSTED, message larger than max", err)
			}
			if took > refuseWithin {
				t.Errorf("refused after %s, want within %s", took, refuseWithin)
			}
			rss, peak, err := a.memory()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("node A: VmRSS %d MiB, VmHWM %d MiB", rss>>20, peak>>20)
			if peak > rssCeiling {
				t.Errorf("node A's peak RSS %d MiB, want under %d MiB", peak>>20, rssCeiling>>20)
			}
			checkHealthy(t, a, tc.addr)
		})
	}
	recB := subscribe(t, c, 1, "after-huge/")
	exp := newExpectations()
	submit(t, c, 0, event("after-huge/x", "still works"), exp)
	waitLatest(t, convergeTimeout, exp.snapshot(), recB)
}

// withUnknown returns ev with an unknown field 99 of n bytes, as a newer (or hostile)
// client encodes it.
func withUnknown(ev *fanoutv1.Event, n int) *fanoutv1.Event {
	ev.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, n)))
	return ev
}

// TestUnknownFieldsBounded: unknown fields count toward an event's bytes, on the app
// path and the peer path. A few are fine (a newer client's event is stored and
// delivered with them); an event that they take past --max-event-bytes' bound is
// refused (INVALID_ARGUMENT naming the event on Submit, ITEM_STATUS_INVALID on
// Replicate), and one past the listener's message bound never reaches the handler.
func TestUnknownFieldsBounded(t *testing.T) {
	c := startCluster(t, specs(2, "--max-event-bytes=1024")...)
	a, b := c.node(0), c.node(1)
	recB := subscribe(t, c, 1, "unknown/")
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()

	t.Run("app listener", func(t *testing.T) {
		_, err := c.client(0).Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{
			{TaskId: "unknown/ok", Payload: []byte("fine")}, withUnknown(&fanoutv1.Event{TaskId: "unknown/bloated"}, 64<<10),
		}})
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), "events[1]: ") || !strings.Contains(st.Message(), "does not know") {
			t.Errorf("64 KiB of unknown fields: %v, want INVALID_ARGUMENT naming events[1] and unknown fields", err)
		}
		_, err = c.client(0).Submit(ctx, &fanoutv1.SubmitRequest{Events: []*fanoutv1.Event{withUnknown(&fanoutv1.Event{TaskId: "unknown/huge"}, 100<<20)}})
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
			t.Errorf("100 MiB of unknown fields: %v, want RESOURCE_EXHAUSTED (over --max-request-bytes)", err)
		}
	})
	t.Run("peer listener", func(t *testing.T) {
		peer := fanoutv1.NewPeerServiceClient(dial(t, b.peerAddr))
		resp, err := peer.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "X", Events: []*fanoutv1.Event{
			withUnknown(&fanoutv1.Event{TaskId: "unknown/peer-small", Version: 1}, 100),
			withUnknown(&fanoutv1.Event{TaskId: "unknown/peer-bloated", Version: 1}, 64<<10),
		}})
		want := []fanoutv1.ItemStatus{fanoutv1.ItemStatus_ITEM_STATUS_OK, fanoutv1.ItemStatus_ITEM_STATUS_INVALID}
		if err != nil || fmt.Sprint(resp.GetStatuses()) != fmt.Sprint(want) {
			t.Errorf("Replicate: %v %v, want statuses %v", resp.GetStatuses(), err, want)
		}
		_, err = peer.Replicate(ctx, &fanoutv1.ReplicateRequest{OriginNode: "X", Events: []*fanoutv1.Event{
			withUnknown(&fanoutv1.Event{TaskId: "unknown/peer-huge", Version: 1}, 100<<20),
		}})
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
			t.Errorf("100 MiB of unknown fields: %v, want RESOURCE_EXHAUSTED (over the peer listener's bound)", err)
		}
	})

	// A newer client's event with a few unknown fields is taken and delivered, unknown
	// fields and all (the sidecar passes event bytes through).
	exp := newExpectations()
	reqs := [][]*fanoutv1.Event{{withUnknown(&fanoutv1.Event{TaskId: "unknown/newer-client", Payload: []byte("p")}, 100)}}
	submit(t, c, 0, reqs, exp)
	waitLatest(t, convergeTimeout, exp.snapshot(), recB)
	for _, d := range recB.deliveries() {
		if strings.Contains(d.TaskID, "bloated") || strings.Contains(d.TaskID, "huge") {
			t.Errorf("B delivered %s", d.TaskID)
		}
	}
	entry := getEntry(t, c, 1, "unknown/newer-client")
	if n := len(entry.GetEvent().ProtoReflect().GetUnknown()); n != 103 {
		t.Errorf("B's entry keeps %d bytes of unknown fields, want the 103 sent", n)
	}
	for _, n := range []*node{a, b} {
		checkHealthy(t, n, n.peerAddr)
	}
}

// TestSmallerPeerLimitNotRetriedForever: B takes smaller messages than A sends (its
// --max-batch-bytes and --max-event-bytes are smaller). A's batches that B refuses as
// too large are split until B takes them; an event B refuses alone is dropped and
// counted in too_large, with a WARN naming it. Nothing is retried forever, it is not
// counted as congestion, and every other event reaches B.
func TestSmallerPeerLimitNotRetriedForever(t *testing.T) {
	c := startCluster(t,
		nodeSpec{ID: "A", Flags: []string{"--max-event-bytes=2097152"}},
		nodeSpec{ID: "B", Flags: []string{"--max-event-bytes=16384", "--max-batch-bytes=65536"}},
	)
	a := c.node(0)
	recB := subscribe(t, c, 1, "limit/")
	// 300 events of 10 KiB in requests of 150: A's batches of up to 250 events
	// (2.5 MiB) are more than B's peer listener takes (1 MiB of anti-entropy message
	// plus one event), and each event is within B's --max-event-bytes. Then one event
	// of 1.5 MiB, which A takes and B's listener refuses even alone.
	reqs := changes("limit/small/", "v1", 300, 150)
	for _, r := range reqs {
		for _, ev := range r {
			ev.Payload = make([]byte, 10<<10)
		}
	}
	exp := newExpectations()
	submit(t, c, 0, reqs, exp)
	big := &fanoutv1.Event{TaskId: "limit/big", Payload: make([]byte, 1536<<10)}
	submit(t, c, 0, [][]*fanoutv1.Event{{big}}, newExpectations())
	marker := event("limit/marker", "after the big one")
	submit(t, c, 0, marker, exp)
	waitLatest(t, convergeTimeout, exp.snapshot(), recB)

	var p *fanoutv1.PeerStatus
	eventually(t, convergeTimeout, "A's queue for B to empty, with the big event too_large", func() error {
		var err error
		if p, err = a.peerStatus(1); err != nil {
			return err
		}
		if p.GetPending()+p.GetInFlight()+p.GetReprocessQueue()+p.GetAcceptorQueue() > 0 || p.GetTooLarge() != 1 {
			return fmt.Errorf("peer B: %v", p)
		}
		return nil
	})
	if p.GetSucceeded() != 301 || p.GetCongestion() != 0 || p.GetPermanent() != 0 {
		t.Errorf("A's counters for B: %v; want 301 succeeded, no congestion, no permanent", p)
	}
	if p.GetLastError().GetClass() != "too_large" {
		t.Errorf("A's last error for B: %v, want class too_large", p.GetLastError())
	}
	// Nothing keeps being sent again.
	replayed := p.GetReplayed()
	time.Sleep(time.Second) // a window for retries that must not happen, not a wait for an event
	if q, err := a.peerStatus(1); err != nil || q.GetReplayed() != replayed || q.GetTooLarge() != 1 {
		t.Errorf("a second later: %v %v; replayed was %d", q, err, replayed)
	}
	if got, err := a.metric("fanout_peer_events_total", `kind="too_large"`); err != nil || got != 1 {
		t.Errorf("fanout_peer_events_total{kind=\"too_large\"} = %v, %v; want 1", got, err)
	}
	log := a.log()
	if !strings.Contains(log, `"task_ids":["limit/big"]`) || !strings.Contains(log, `"class":"too_large"`) {
		t.Errorf("A's log names neither the dropped event nor the class too_large:\n%s", a.logTail())
	}
	for _, d := range recB.deliveries() {
		if d.TaskID == big.TaskId {
			t.Errorf("B delivered %s", d.TaskID)
		}
	}
}
