package fanout

import (
	"context"
	"fmt"
	"slices"
	"testing"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// windowClient sends SubmitStream requests of one event each and reads the answers,
// splitting a window's answer into one per request it covers.
type windowClient struct {
	t      *testing.T
	stream *submitStream
	// events per request id sent, to split a window's results
	events map[uint64]int
}

func (w *windowClient) send(id uint64, window bool, ack fanoutv1.AckPolicy, evs ...*fanoutv1.Event) {
	w.t.Helper()
	if err := w.stream.Send(&fanoutv1.SubmitRequest{RequestId: id, WindowAnswers: window, Ack: ack, Events: evs}); err != nil {
		w.t.Fatal(err)
	}
	w.events[id] = len(evs)
}

// answer reads one answer and returns the requests it covers with each one's results.
func (w *windowClient) answer() ([]uint64, map[uint64][]*fanoutv1.EventResult, *fanoutv1.SubmitResponse) {
	w.t.Helper()
	resp, err := w.stream.Recv()
	if err != nil {
		w.t.Fatal(err)
	}
	ids := resp.GetRequestIds()
	if len(ids) == 0 {
		ids = []uint64{resp.GetRequestId()}
	} else if ids[len(ids)-1] != resp.GetRequestId() {
		w.t.Fatalf("an answer of %v has request_id %d, want the last", ids, resp.GetRequestId())
	}
	results := map[uint64][]*fanoutv1.EventResult{}
	rest, versions := resp.GetResults(), resp.GetVersions()
	if len(rest) != len(versions) {
		w.t.Fatalf("%d results and %d versions", len(rest), len(versions))
	}
	for _, id := range ids {
		n := w.events[id]
		if n > len(rest) {
			w.t.Fatalf("answer %v: %d results left for request %d of %d events", ids, len(rest), id, n)
		}
		results[id], rest = rest[:n], rest[n:]
	}
	if len(rest) != 0 {
		w.t.Fatalf("answer %v: %d results over", ids, len(rest))
	}
	return ids, results, resp
}

func newWindowClient(t *testing.T, app appClient) *windowClient {
	t.Helper()
	stream, err := app.SubmitStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &windowClient{t: t, stream: stream, events: map[uint64]int{}}
}

// eachStore runs f on a node without a data dir and on one with, each with a stream
// client of its own.
func eachStore(t *testing.T, f func(t *testing.T, w *windowClient)) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("data-dir=%t", durable), func(t *testing.T) {
			cfg := testConfig("a")
			if durable {
				cfg.Store = openTestStore(t, t.TempDir())
			}
			f(t, newWindowClient(t, startTestNode(t, cfg).app))
		})
	}
}

// TestSubmitStreamWindows: requests that set window_answers are answered together,
// at the latest with the next request that does not set it, in the order sent, with
// their results in order; one alone is answered as without windows; a request that
// waits for acks is answered alone and sends what the window holds first; a bad
// request ends the stream after an answer of every request before it.
func TestSubmitStreamWindows(t *testing.T) {
	eachStore(t, func(t *testing.T, w *windowClient) {
		const queued = fanoutv1.AckPolicy_ACK_POLICY_QUEUED
		for id := uint64(1); id <= 4; id++ {
			w.send(id, id < 4, queued, ev(fmt.Sprintf("w%d", id), "x"), ev(fmt.Sprintf("w%d/b", id), "y"))
		}
		ids, results, resp := w.answer()
		if !slices.Equal(ids, []uint64{1, 2, 3, 4}) || !resp.GetSatisfied() {
			t.Fatalf("the window's answer covers %v (satisfied %t), want [1 2 3 4], satisfied", ids, resp.GetSatisfied())
		}
		var last uint64
		for _, id := range ids {
			for _, r := range results[id] {
				if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED || r.GetRevision() <= last {
					t.Fatalf("request %d: %v; want accepted at rising revisions", id, r)
				}
				last = r.GetRevision()
			}
		}

		// One without a window: answered alone, as before v1.2.
		w.send(5, false, queued, ev("alone", "x"))
		if ids, _, resp := w.answer(); !slices.Equal(ids, []uint64{5}) || len(resp.GetRequestIds()) != 0 {
			t.Fatalf("a request without a window: answer %v, request_ids %v; want 5 alone, no request_ids", ids, resp.GetRequestIds())
		}

		// QUORUM on a lone node waits for nothing: answered in order, with the
		// window it ends.
		w.send(6, true, queued, ev("w6", "x"))
		w.send(7, false, fanoutv1.AckPolicy_ACK_POLICY_QUORUM, ev("w7", "x"))
		if ids, _, _ := w.answer(); !slices.Equal(ids, []uint64{6, 7}) {
			t.Fatalf("a window ended by a QUORUM request that waits for nothing: answer %v, want [6 7]", ids)
		}

		// A bad request in a window: the ones before it are answered, then the
		// stream ends with its error.
		w.send(8, true, queued, ev("w8", "x"))
		w.send(9, true, queued, &fanoutv1.Event{})
		if ids, _, _ := w.answer(); !slices.Equal(ids, []uint64{8}) {
			t.Fatalf("before the bad request: answer %v, want [8]", ids)
		}
		_, err := w.stream.Recv()
		wantInvalid(t, err, "events[0].task_id")
	})
}

// TestSubmitStreamWindowBound: a window is sent once it holds maxWindowRequests
// requests, without waiting for one that does not set window_answers.
func TestSubmitStreamWindowBound(t *testing.T) {
	tn := startTestNode(t, testConfig("a"))
	w := newWindowClient(t, tn.app)
	for id := uint64(1); id <= maxWindowRequests; id++ {
		w.send(id, true, fanoutv1.AckPolicy_ACK_POLICY_QUEUED, ev(fmt.Sprintf("b%d", id), "x"))
	}
	ids, _, _ := w.answer()
	if len(ids) != maxWindowRequests || ids[0] != 1 || ids[len(ids)-1] != maxWindowRequests {
		t.Fatalf("a full window's answer covers %d requests (%d..%d), want 1..%d", len(ids), ids[0], ids[len(ids)-1], maxWindowRequests)
	}
	w.stream.CloseSend()
}

// TestSubmitStreamWindowAcks: a request that waits for its peers' acks is answered
// alone, and one that does not set window_answers sends what the window holds first.
func TestSubmitStreamWindowAcks(t *testing.T) {
	nodes := cluster(t, []string{"a", "b"}, nil)
	w := newWindowClient(t, nodes["a"].app)
	w.send(1, true, fanoutv1.AckPolicy_ACK_POLICY_QUEUED, ev("a1", "x"))
	w.send(2, true, fanoutv1.AckPolicy_ACK_POLICY_QUEUED, ev("a2", "x"))
	w.send(3, false, fanoutv1.AckPolicy_ACK_POLICY_ALL, ev("a3", "x"))
	if ids, _, _ := w.answer(); !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("first answer covers %v, want the window [1 2], sent when request 3 was read", ids)
	}
	ids, results, resp := w.answer()
	if !slices.Equal(ids, []uint64{3}) || !resp.GetSatisfied() || len(resp.GetPeerAcks()) != 1 || len(results[3]) != 1 {
		t.Fatalf("second answer: %v, satisfied %t, peer acks %v; want request 3 alone, acked by b", ids, resp.GetSatisfied(), resp.GetPeerAcks())
	}
	w.stream.CloseSend()
}

// TestSubmitStreamAnswerHold: requests with answer_hold_micros are held as with
// window_answers, and sent together once the first has waited its hold, with no
// request after them; one without a hold sends them with its own answer; with a data
// dir, the same, each once on disk. The stream then ends cleanly (the timer stopped).
func TestSubmitStreamAnswerHold(t *testing.T) {
	eachStore(t, func(t *testing.T, w *windowClient) {
		held := func(id uint64, hold uint32, key string) {
			t.Helper()
			if err := w.stream.Send(&fanoutv1.SubmitRequest{RequestId: id, AnswerHoldMicros: hold,
				Ack: fanoutv1.AckPolicy_ACK_POLICY_QUEUED, Events: []*fanoutv1.Event{ev(key, "x")}}); err != nil {
				t.Fatal(err)
			}
			w.events[id] = 1
		}
		// Two held for 20 ms, nothing after them: one answer, from the timer.
		held(1, 20_000, "h1")
		held(2, 20_000, "h2")
		ids, results, resp := w.answer()
		if !slices.Equal(ids, []uint64{1, 2}) || !resp.GetSatisfied() {
			t.Fatalf("held answers: %v (satisfied %t), want [1 2] in one answer, satisfied", ids, resp.GetSatisfied())
		}
		for _, id := range ids {
			if r := results[id][0]; r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
				t.Fatalf("request %d: %v, want accepted", id, r)
			}
		}
		// Held for the cap (a slow machine may pass it: then 3 comes alone first),
		// then one without a hold: 3 is answered no later than with 4.
		held(3, 100_000, "h3")
		w.send(4, false, fanoutv1.AckPolicy_ACK_POLICY_QUEUED, ev("h4", "x"))
		var got []uint64
		for !slices.Contains(got, 4) {
			ids, _, _ := w.answer()
			got = append(got, ids...)
		}
		if !slices.Equal(got, []uint64{3, 4}) {
			t.Fatalf("answers %v, want [3 4] in order", got)
		}
		held(5, 100_000, "h5") // held when the client closes: answered before the end
		if err := w.stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if ids, _, _ := w.answer(); !slices.Equal(ids, []uint64{5}) {
			t.Fatalf("at the stream's end: %v, want [5]", ids)
		}
		if _, err := w.stream.Recv(); err == nil {
			t.Fatal("the stream went on after its last answer")
		}
	})
}
