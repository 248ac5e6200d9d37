package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// submitTimeout bounds one Submit call or one SubmitStream session.
const submitTimeout = 30 * time.Second

// expected is the latest (version, origin) and payload that subscribers should end
// with for one task_id, or its deletion. A nil Payload is not checked.
type expected struct {
	Stamp   stamp
	Payload []byte
	Deleted bool // the latest write is a tombstone: Get and snapshots omit the task
}

// observer records what an origin accepted: a ledger or expectations.
type observer interface {
	observe(origin string, events []*fanoutv1.Event, resp *fanoutv1.SubmitResponse) error
}

// accepted returns, per event of a request that origin answered with resp, whether
// the node accepted it (SubmitResponse.results): an event answered STALE or REFUSED
// was neither stored nor sent, so it is nobody's latest state.
func accepted(origin string, events []*fanoutv1.Event, resp *fanoutv1.SubmitResponse) ([]bool, error) {
	vs, rs := resp.GetVersions(), resp.GetResults()
	if len(vs) != len(events) || len(rs) != len(events) {
		return nil, fmt.Errorf("%s answered %d versions and %d results for %d events", origin, len(vs), len(rs), len(events))
	}
	out := make([]bool, len(events))
	for i, r := range rs {
		switch r.GetOutcome() {
		case fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED:
			out[i] = true
		case fanoutv1.EventOutcome_EVENT_OUTCOME_STALE, fanoutv1.EventOutcome_EVENT_OUTCOME_REFUSED:
		default:
			return nil, fmt.Errorf("%s answered results[%d] = %v", origin, i, r)
		}
	}
	return out, nil
}

// expectations collect, from Submit responses, the newest stamp per task_id: what
// every peer converges to. Safe for concurrent submitters.
type expectations struct {
	mu     sync.Mutex
	latest map[string]expected // guarded by mu
	events int                 // guarded by mu; events accepted
}

func newExpectations() *expectations {
	return &expectations{latest: make(map[string]expected)}
}

// observe records a request that origin answered with resp: the events it accepted,
// with the versions it assigned.
func (e *expectations) observe(origin string, events []*fanoutv1.Event, resp *fanoutv1.SubmitResponse) error {
	ok, err := accepted(origin, events, resp)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, ev := range events {
		if !ok[i] {
			continue
		}
		e.events++
		s := stamp{Version: resp.GetVersions()[i], Origin: origin}
		if cur, ok := e.latest[ev.GetTaskId()]; !ok || s.newerThan(cur.Stamp) {
			e.latest[ev.GetTaskId()] = expected{Stamp: s, Payload: ev.GetPayload(), Deleted: ev.GetDeleted()}
		}
	}
	return nil
}

// count returns the number of events accepted.
func (e *expectations) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.events
}

// snapshot returns a copy of the expected latest state.
func (e *expectations) snapshot() map[string]expected {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]expected, len(e.latest))
	for k, v := range e.latest {
		out[k] = v
	}
	return out
}

// updates builds rounds×tasks events: request r updates every task once, in batches
// of at most batch events. Task ids are prefix+"%04d"; payloads name task and round.
func updates(prefix string, tasks, rounds, batch int) [][]*fanoutv1.Event {
	var reqs [][]*fanoutv1.Event
	for r := range rounds {
		var cur []*fanoutv1.Event
		for i := range tasks {
			id := fmt.Sprintf("%s%04d", prefix, i)
			cur = append(cur, &fanoutv1.Event{TaskId: id, Payload: fmt.Appendf(nil, "%s@%d", id, r)})
			if len(cur) == batch {
				reqs = append(reqs, cur)
				cur = nil
			}
		}
		if len(cur) > 0 {
			reqs = append(reqs, cur)
		}
	}
	return reqs
}

// submitAll sends each request with a unary Submit through cli to the node named
// origin, and records what it accepted. It is safe to call from any goroutine.
func submitAll(cli fanoutv1.FanoutServiceClient, origin string, reqs [][]*fanoutv1.Event, exp observer) error {
	for i, events := range reqs {
		ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
		resp, err := cli.Submit(ctx, &fanoutv1.SubmitRequest{Events: events, RequestId: uint64(i + 1)})
		cancel()
		if err != nil {
			return fmt.Errorf("Submit #%d to %s: %w", i, origin, err)
		}
		if err := exp.observe(origin, events, resp); err != nil {
			return err
		}
	}
	return nil
}

// submitStream sends every request on one SubmitStream, pipelined, and checks that
// the responses come back one per request, in order, matched by request_id. It is safe
// to call from any goroutine.
func submitStream(cli fanoutv1.FanoutServiceClient, origin string, reqs [][]*fanoutv1.Event, exp observer) error {
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	stream, err := cli.SubmitStream(ctx)
	if err != nil {
		return fmt.Errorf("SubmitStream to %s: %w", origin, err)
	}
	sendErr := make(chan error, 1)
	go func() {
		for i, events := range reqs {
			if err := stream.Send(&fanoutv1.SubmitRequest{Events: events, RequestId: uint64(1000 + i)}); err != nil {
				sendErr <- fmt.Errorf("send #%d: %w", i, err)
				return
			}
		}
		sendErr <- stream.CloseSend()
	}()
	var errs []error
	for i, events := range reqs {
		resp, err := stream.Recv()
		if err != nil {
			cancel()
			errs = append(errs, fmt.Errorf("response #%d: %w", i, err))
			break
		}
		if got, want := resp.GetRequestId(), uint64(1000+i); got != want {
			errs = append(errs, fmt.Errorf("response #%d has request_id %d, want %d", i, got, want))
		}
		if err := exp.observe(origin, events, resp); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if _, err := stream.Recv(); err != io.EOF {
			errs = append(errs, fmt.Errorf("after the last response: %v, want EOF", err))
		}
	}
	if err := <-sendErr; err != nil && len(errs) == 0 {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("SubmitStream to %s: %w", origin, err)
	}
	return nil
}

// sendSubmit sends req with a unary Submit, bounded by submitTimeout.
func sendSubmit(cli fanoutv1.FanoutServiceClient, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	return cli.Submit(ctx, req)
}

// submit is submitAll through node n of c, failing the test on error.
func submit(t testing.TB, c *cluster, n int, reqs [][]*fanoutv1.Event, exp observer) {
	t.Helper()
	if err := submitAll(c.client(n), c.node(n).spec.ID, reqs, exp); err != nil {
		t.Fatal(err)
	}
}

// event is a one-event request batch for submit.
func event(taskID, payload string) [][]*fanoutv1.Event {
	return [][]*fanoutv1.Event{{{TaskId: taskID, Payload: []byte(payload)}}}
}

// pacedLoad submits a list of requests per origin, the origins concurrently, each
// origin one request per interval (back to back for 0), and records what the origins
// accepted. Cleanup abandons what is left.
type pacedLoad struct {
	total int           // requests over all origins
	done  chan struct{} // closed when every submitter has returned
	stop  chan struct{} // closed by Cleanup
	wg    sync.WaitGroup

	mu   sync.Mutex
	sent int     // guarded by mu; requests answered
	errs []error // guarded by mu
}

// startPaced starts one submitter per entry of reqs (node index → requests).
func startPaced(t *testing.T, c *cluster, reqs map[int][][]*fanoutv1.Event, interval time.Duration, obs observer) *pacedLoad {
	t.Helper()
	p := &pacedLoad{done: make(chan struct{}), stop: make(chan struct{})}
	for n, rs := range reqs {
		p.total += len(rs)
		cli, origin := c.client(n), c.node(n).spec.ID
		p.wg.Go(func() { p.submit(cli, origin, rs, interval, obs) })
	}
	go func() {
		p.wg.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		close(p.stop)
		<-p.done
	})
	return p
}

func (p *pacedLoad) submit(cli fanoutv1.FanoutServiceClient, origin string, reqs [][]*fanoutv1.Event, interval time.Duration, obs observer) {
	pace := newPacer(interval)
	defer pace.stop()
	for i := range reqs {
		select {
		case <-pace.c:
		case <-p.stop:
			return
		}
		err := submitAll(cli, origin, reqs[i:i+1], obs)
		p.mu.Lock()
		p.sent++
		if err != nil {
			p.errs = append(p.errs, err)
		}
		p.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// progress returns the share of requests answered so far, 0..1.
func (p *pacedLoad) progress() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return float64(p.sent) / float64(max(1, p.total))
}

// wait waits for every submitter (each Submit is bounded by submitTimeout) and fails
// the test on a submit error.
func (p *pacedLoad) wait(t *testing.T) {
	t.Helper()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := errors.Join(p.errs...); err != nil {
		t.Fatal(err)
	}
}

// only returns the tasks of want whose id starts with prefix.
func only(want map[string]expected, prefix string) map[string]expected {
	out := make(map[string]expected)
	for id, w := range want {
		if strings.HasPrefix(id, prefix) {
			out[id] = w
		}
	}
	return out
}

// sized gives every event of reqs a payload of n bytes that starts with its old one.
func sized(reqs [][]*fanoutv1.Event, n int) [][]*fanoutv1.Event {
	for _, events := range reqs {
		for _, ev := range events {
			ev.Payload = append(ev.Payload, bytes.Repeat([]byte{'.'}, max(0, n-len(ev.Payload)))...)
		}
	}
	return reqs
}

// both records a request in several observers.
type both []observer

func (b both) observe(origin string, events []*fanoutv1.Event, resp *fanoutv1.SubmitResponse) error {
	for _, o := range b {
		if err := o.observe(origin, events, resp); err != nil {
			return err
		}
	}
	return nil
}

// submitResp sends req to node n with a unary Submit, records it in obs and returns
// the response.
func submitResp(t *testing.T, c *cluster, n int, req *fanoutv1.SubmitRequest, obs observer) *fanoutv1.SubmitResponse {
	t.Helper()
	resp, err := sendSubmit(c.client(n), req)
	if err != nil {
		t.Fatalf("Submit to %s: %v", c.node(n).spec.ID, err)
	}
	if obs != nil {
		if err := obs.observe(c.node(n).spec.ID, req.GetEvents(), resp); err != nil {
			t.Fatal(err)
		}
	}
	return resp
}
