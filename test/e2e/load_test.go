package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// submitTimeout bounds one Submit call or one SubmitStream session.
const submitTimeout = 30 * time.Second

// expected is the latest (version, origin) and payload that subscribers should end
// with for one task_id. A nil Payload is not checked.
type expected struct {
	Stamp   stamp
	Payload []byte
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

// observe records a request that origin accepted, with the versions it assigned.
func (e *expectations) observe(origin string, events []*fanoutv1.Event, versions []uint64) error {
	if len(versions) != len(events) {
		return fmt.Errorf("%s answered %d versions for %d events", origin, len(versions), len(events))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events += len(events)
	for i, ev := range events {
		s := stamp{Version: versions[i], Origin: origin}
		if cur, ok := e.latest[ev.GetTaskId()]; !ok || s.newerThan(cur.Stamp) {
			e.latest[ev.GetTaskId()] = expected{Stamp: s, Payload: ev.GetPayload()}
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
// origin, and records the versions. It is safe to call from any goroutine.
func submitAll(cli fanoutv1.FanoutServiceClient, origin string, reqs [][]*fanoutv1.Event, exp *expectations) error {
	for i, events := range reqs {
		ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
		resp, err := cli.Submit(ctx, &fanoutv1.SubmitRequest{Events: events, RequestId: uint64(i + 1)})
		cancel()
		if err != nil {
			return fmt.Errorf("Submit #%d to %s: %w", i, origin, err)
		}
		if err := exp.observe(origin, events, resp.GetVersions()); err != nil {
			return err
		}
	}
	return nil
}

// submitStream sends every request on one SubmitStream, pipelined, and checks that
// the responses come back one per request, in order, matched by request_id. It is safe
// to call from any goroutine.
func submitStream(cli fanoutv1.FanoutServiceClient, origin string, reqs [][]*fanoutv1.Event, exp *expectations) error {
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
		if err := exp.observe(origin, events, resp.GetVersions()); err != nil {
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

// submit is submitAll through node n of c, failing the test on error.
func submit(t testing.TB, c *cluster, n int, reqs [][]*fanoutv1.Event, exp *expectations) {
	t.Helper()
	if err := submitAll(c.client(n), c.node(n).spec.ID, reqs, exp); err != nil {
		t.Fatal(err)
	}
}

// event is a one-event request batch for submit.
func event(taskID, payload string) [][]*fanoutv1.Event {
	return [][]*fanoutv1.Event{{{TaskId: taskID, Payload: []byte(payload)}}}
}
