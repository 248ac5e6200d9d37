package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fanout/fanout/pkg/client"
)

// TestPublisher: 64 goroutines put one event at a time; every Pending resolves
// accepted with its own revision, the sidecar holds every key at the version its
// result says, and the puts shared far fewer requests than events.
func TestPublisher(t *testing.T) {
	nodes := startNodes(t, 2)
	c := dial(t, nodes[0].app)
	ctx := within(t, time.Minute)
	p, err := client.NewPublisher(c, client.PublisherConfig{Ack: client.All, AckTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const writers, each = 64, 40
	results := make([][]client.Result, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				f, err := p.Put(ctx, fmt.Sprintf("pub/g%02d/k%02d", g, i), []byte(fmt.Sprint(g, "-", i)))
				if err != nil {
					errs <- err
					return
				}
				r, err := f.Wait(ctx)
				if err != nil {
					errs <- err
					return
				}
				results[g] = append(results[g], r)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	revs := make(map[uint64]bool)
	for g := range writers {
		for i, r := range results[g] {
			if r.Outcome != client.Accepted || !r.Satisfied || len(r.PeerAcks) != 1 || revs[r.Revision] {
				t.Fatalf("g%d k%d: %+v, want accepted, satisfied by the peer, a revision of its own", g, i, r)
			}
			revs[r.Revision] = true
		}
	}
	// Every key is on the peer too (ALL), at its result's version.
	peer := dial(t, nodes[1].app)
	got, err := peer.ListAll(ctx, "pub/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*each {
		t.Fatalf("the peer holds %d keys, want %d", len(got), writers*each)
	}
	for g := range writers {
		for i, r := range results[g] {
			if e := got[fmt.Sprintf("pub/g%02d/k%02d", g, i)]; e.Version != r.Version || string(e.Value) != fmt.Sprint(g, "-", i) {
				t.Fatalf("g%d k%d on the peer: %+v, want version %d", g, i, e, r.Version)
			}
		}
	}
	st := p.Stats()
	t.Logf("%+v: %.1f events per request", st, float64(st.Events)/float64(st.Requests))
	if st.Events != writers*each || st.Requests*2 > st.Events || st.Streams != 1 {
		t.Errorf("stats %+v: want %d events in at most half as many requests, on one stream", st, writers*each)
	}
}

// TestPublisherBounds: with the sidecar stopped nothing is answered, so Put blocks
// once MaxBytes are queued and in flight (until its ctx ends); once the sidecar goes
// on every Pending resolves and Flush returns; after Close, Put is ErrClosed. Events
// the sidecar would refuse fail at once, and a refused event fails alone.
func TestPublisherBounds(t *testing.T) {
	n := startNodes(t, 1)[0]
	c := dial(t, n.app)
	ctx := within(t, time.Minute)
	cfg := client.PublisherConfig{MaxEventBytes: 1000, MaxBatchBytes: 4000, MaxBytes: 8000, MaxInFlight: 2}
	p, err := client.NewPublisher(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	value := make([]byte, 900)
	if _, err := p.Put(ctx, "bounds/big", make([]byte, 1001)); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "MaxEventBytes") {
		t.Errorf("a value over MaxEventBytes: %v, want ErrInvalid naming MaxEventBytes", err)
	}
	if _, err := p.Put(ctx, "", value); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("an empty key: %v, want ErrInvalid", err)
	}
	// One ready first, so that the stream is open before the sidecar stops.
	if f, err := p.Put(ctx, "bounds/first", value); err != nil {
		t.Fatal(err)
	} else if _, err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	n.signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			n.signal(syscall.SIGCONT)
		}
	}()
	var pending []*client.Pending
	var blocked error
	for i := range 20 {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		f, err := p.Put(pctx, fmt.Sprintf("bounds/k%02d", i), value)
		cancel()
		if err != nil {
			blocked = err
			break
		}
		pending = append(pending, f)
	}
	// Each event is about 930 bytes as counted: 8000 bytes take 8 of them.
	if !errors.Is(blocked, context.DeadlineExceeded) || len(pending) != 8 {
		t.Fatalf("with the sidecar stopped: %d puts taken, then %v; want 8, then a Put blocked until its deadline", len(pending), blocked)
	}
	for _, f := range pending {
		select {
		case <-f.Done():
			t.Fatal("a put resolved while the sidecar was stopped")
		default:
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if err := p.Flush(fctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Flush with the sidecar stopped: %v, want its deadline", err)
	}
	cancel()

	n.signal(syscall.SIGCONT)
	stopped = false
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, f := range pending {
		select {
		case <-f.Done():
		default:
			t.Fatalf("k%02d not resolved after Flush", i)
		}
		if r, err := f.Wait(ctx); err != nil || r.Outcome != client.Accepted {
			t.Errorf("k%02d: %+v %v", i, r, err)
		}
	}
	// A stale event fails alone: the others of its batch are accepted.
	stale, _ := p.Put(ctx, "bounds/k00", value, client.WithVersion(1))
	fresh, _ := p.Put(ctx, "bounds/fresh", value)
	if _, err := stale.Wait(ctx); !errors.Is(err, client.ErrStale) {
		t.Errorf("a stale put: %v, want ErrStale", err)
	}
	if r, err := fresh.Wait(ctx); err != nil || r.Outcome != client.Accepted {
		t.Errorf("the put after a stale one: %+v %v", r, err)
	}

	p.Close()
	if _, err := p.Put(ctx, "bounds/late", value); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Put after Close: %v, want ErrClosed", err)
	}
	if _, err := client.NewPublisher(c, client.PublisherConfig{MaxBatchEvents: 10001}); err == nil || !strings.Contains(err.Error(), "MaxBatchEvents") {
		t.Errorf("MaxBatchEvents 10001: %v, want an error naming it", err)
	}
}

// TestPublisherStreamBreaks: the sidecar killed with events in flight fails them
// with an *Error (ErrUnavailable); once it is back, the next puts go on a new stream.
func TestPublisherStreamBreaks(t *testing.T) {
	n := startNodes(t, 1)[0]
	c := dial(t, n.app)
	ctx := within(t, time.Minute)
	p, err := client.NewPublisher(c, client.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if f, err := p.Put(ctx, "breaks/a", []byte("x")); err != nil {
		t.Fatal(err)
	} else if _, err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	n.signal(syscall.SIGSTOP)
	f, err := p.Put(ctx, "breaks/b", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for p.Stats().Requests < 2 { // sent (in flight once counted), unanswered
		if ctx.Err() != nil {
			t.Fatal("the second put was never sent")
		}
		time.Sleep(time.Millisecond)
	}
	n.kill()
	if _, err := f.Wait(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("a put in flight when the sidecar died: %v, want ErrUnavailable", err)
	}
	n.launch()
	n.waitReady()
	for {
		f, err := p.Put(ctx, "breaks/c", []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := f.Wait(ctx)
		if err == nil && r.Outcome == client.Accepted {
			break
		}
		if !errors.Is(err, client.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("a put after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the connection is coming back
	}
	if st := p.Stats(); st.Streams < 2 {
		t.Errorf("stats %+v: want a new stream after the break", st)
	}
}

// TestPublisherInvalidFailsAlone: an event the sidecar refuses (a version past its
// bounds, which the client cannot check) ends the stream with INVALID_ARGUMENT; the
// events batched with it are submitted again alone and accepted, and only it fails.
func TestPublisherInvalidFailsAlone(t *testing.T) {
	n := startNodes(t, 1)[0]
	c := dial(t, n.app)
	ctx := within(t, time.Minute)
	p, err := client.NewPublisher(c, client.PublisherConfig{MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if f, err := p.Put(ctx, "alone/open", []byte("x")); err != nil {
		t.Fatal(err)
	} else if _, err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	n.signal(syscall.SIGSTOP)
	first, _ := p.Put(ctx, "alone/first", []byte("x"))
	for p.Stats().Requests < 2 { // first in flight: the next ones wait, and batch
		time.Sleep(time.Millisecond)
	}
	good1, _ := p.Put(ctx, "alone/good1", []byte("x"))
	bad, _ := p.Put(ctx, "alone/bad", []byte("x"), client.WithVersion(^uint64(0)))
	good2, _ := p.Put(ctx, "alone/good2", []byte("x"))
	n.signal(syscall.SIGCONT)
	for name, f := range map[string]*client.Pending{"first": first, "good1": good1, "good2": good2} {
		if r, err := f.Wait(ctx); err != nil || r.Outcome != client.Accepted {
			t.Errorf("%s: %+v %v, want accepted", name, r, err)
		}
	}
	if _, err := bad.Wait(ctx); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "version") {
		t.Errorf("the bad version: %v, want ErrInvalid naming the version", err)
	}
	st := p.Stats()
	if st.Requests != 3 {
		t.Errorf("stats %+v: want 3 requests on the stream (open, first, the batch of three)", st)
	}
	got, err := c.Get(ctx, "alone/good1", "alone/good2", "alone/bad")
	if err != nil || len(got) != 2 {
		t.Errorf("get: %v %v, want good1 and good2", got, err)
	}
	if f, err := p.Put(ctx, "alone/after", []byte("x")); err != nil {
		t.Fatal(err)
	} else if _, err := f.Wait(ctx); err != nil {
		t.Errorf("a put after: %v", err)
	}
}

// TestPublisherWindows: with one event per request (MaxBatchEvents 1) and 64
// goroutines, the publisher sends runs of requests back to back, each but the last
// with window_answers; the sidecar answers a run in one message (API v1.2), so there
// are fewer answers than requests, and every event still gets its own result: the
// version and revision the node holds for its key.
func TestPublisherWindows(t *testing.T) {
	n := startNodes(t, 1)[0]
	c := dial(t, n.app)
	ctx := within(t, time.Minute)
	p, err := client.NewPublisher(c, client.PublisherConfig{MaxBatchEvents: 1, MaxInFlight: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const writers, each = 64, 40
	results := make([][]client.Result, writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				f, err := p.Put(ctx, fmt.Sprintf("win/g%02d/k%02d", g, i), []byte(fmt.Sprint(g, "-", i)))
				if err != nil {
					t.Error(err)
					return
				}
				r, err := f.Wait(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				results[g] = append(results[g], r)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	got, err := c.ListAll(ctx, "win/")
	if err != nil {
		t.Fatal(err)
	}
	for g := range writers {
		for i, r := range results[g] {
			e := got[fmt.Sprintf("win/g%02d/k%02d", g, i)]
			if r.Outcome != client.Accepted || e.Version != r.Version || e.Revision != r.Revision || string(e.Value) != fmt.Sprint(g, "-", i) {
				t.Fatalf("g%d k%d: result %+v, the node holds %+v", g, i, r, e)
			}
		}
	}
	st := p.Stats()
	t.Logf("%+v: %.2f answers per request", st, float64(st.Answers)/float64(st.Requests))
	if st.Requests != writers*each || st.Answers >= st.Requests {
		t.Errorf("stats %+v: want %d requests of one event, and fewer answers (windows)", st, writers*each)
	}
}

// TestPublisherAnswerHold: Puts that trickle in, each sent alone before the next is
// made, share answers (answer_hold_micros, API v1.3): the sidecar holds each and sends
// them together; every Pending still resolves with its own result. With AnswerHold
// negative, each request is answered alone.
func TestPublisherAnswerHold(t *testing.T) {
	n := startNodes(t, 1)[0]
	c := dial(t, n.app)
	ctx := within(t, time.Minute)
	for _, hold := range []time.Duration{100 * time.Millisecond, -1} {
		p, err := client.NewPublisher(c, client.PublisherConfig{AnswerHold: hold})
		if err != nil {
			t.Fatal(err)
		}
		var pending []*client.Pending
		for i := range 4 {
			f, err := p.Put(ctx, fmt.Sprintf("hold/%v/k%d", hold, i), []byte("v"))
			if err != nil {
				t.Fatal(err)
			}
			pending = append(pending, f)
			for p.Stats().Requests < uint64(i+1) { // sent before the next Put
				time.Sleep(100 * time.Microsecond)
			}
		}
		for i, f := range pending {
			if r, err := f.Wait(ctx); err != nil || r.Outcome != client.Accepted {
				t.Fatalf("hold %v, put %d: %+v, %v", hold, i, r, err)
			}
		}
		st := p.Stats()
		if hold > 0 && (st.Requests != 4 || st.Answers >= st.Requests) {
			t.Errorf("hold %v: stats %+v: want 4 requests and fewer answers", hold, st)
		}
		if hold < 0 && (st.Requests != 4 || st.Answers != 4) {
			t.Errorf("no hold: stats %+v: want 4 requests, 4 answers", st)
		}
		p.Close()
	}
	if _, err := client.NewPublisher(c, client.PublisherConfig{AnswerHold: time.Second}); err == nil || !strings.Contains(err.Error(), "AnswerHold") {
		t.Errorf("AnswerHold 1s: %v, want an error naming AnswerHold", err)
	}
}
