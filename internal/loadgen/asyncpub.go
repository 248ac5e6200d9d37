package loadgen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fanout/fanout/pkg/client"
)

// asyncQueue bounds the puts whose results the checker has not read yet. Past it
// the send loop waits, as an app holding that many unread results would; the
// Publisher's own bound (64 MiB queued and in flight) is far above it at 100-byte
// events.
const asyncQueue = 1 << 16

// asyncPut is one Put of --client publisher, until its result is read.
type asyncPut struct {
	f   *client.Pending
	seq int64
	due time.Duration
}

// runPublisher drives the first node as an app making one call per event would:
// through the Go client's asynchronous Publisher (pkg/client, its defaults: it packs
// the puts queued meanwhile into SubmitStream requests, at most 8 in flight, their
// answers sent per window of requests while more are queued), one Put per event. The
// send loop follows the same pacer, stamps and window as the stream path (a send is
// --batch Puts sharing one stamp); a checker goroutine reads the results in order and
// counts them as accept does.
func (p *publisher) runPublisher(ctx context.Context) error {
	ctx, cancel := withoutDeadline(ctx)
	defer cancel()
	pub, err := client.NewPublisher(p.app, client.PublisherConfig{})
	if err != nil {
		return fmt.Errorf("publisher %d: %w", p.index, err)
	}
	defer pub.Close()
	results := make(chan asyncPut, asyncQueue)
	checkErr := make(chan error, 1)
	go func() {
		err := p.check(ctx, results)
		if err != nil {
			cancel() // the send loop stops
		}
		checkErr <- err
	}()
	err = p.sendPuts(ctx, pub, results)
	close(results)
	if cerr := <-checkErr; cerr != nil {
		return cerr // the cause
	}
	return err
}

// sendPuts is the send loop of --client publisher.
func (p *publisher) sendPuts(ctx context.Context, pub *client.Publisher, results chan<- asyncPut) error {
	pacer, wctx, done := p.pace(ctx)
	defer done()
	var seq int64
	for {
		due, ok, err := pacer.Next(ctx)
		if err != nil || !ok {
			return err
		}
		if !pacer.Paced() {
			if err := p.window.Acquire(wctx, p.cfg.Batch); err != nil {
				return ctx.Err() // nil when the publishing time ended meanwhile
			}
		}
		stamp := pacer.Stamp(due)
		// The Publisher does not copy a value until its Pending is done: a payload per
		// send, shared by the send's events (one stamp each, as on the stream path).
		payload := make([]byte, p.cfg.Payload)
		stamp.Put(payload)
		for i := range int64(p.cfg.Batch) {
			p.name = appendTaskID(p.name[:0], p.cfg.Prefix, p.cfg.Keys, seq+i, p.index, p.cfg.Publishers)
			key := string(p.name)
			f, err := pub.Put(ctx, key, payload)
			if err != nil {
				return fmt.Errorf("publisher %d: put: %w", p.index, err)
			}
			select {
			case results <- asyncPut{f: f, seq: seq + i, due: stamp.Due}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		pacer.Done(p.cfg.Batch, stamp)
		p.lastSend.Store(int64(p.clock.since()))
		seq += int64(p.cfg.Batch)
	}
}

// check reads the results of the puts in order: accepted events are counted (and
// measured when due in the measured window, and raise their key's latest version with
// hot keys); STALE and REFUSED ones are counted apart and taken back from the window.
// Any other error (the stream broke: the event's fate is unknown) ends the run.
func (p *publisher) check(ctx context.Context, results <-chan asyncPut) error {
	for r := range results {
		res, err := r.f.Wait(ctx)
		if err != nil {
			var re *client.ResultError
			if !errors.As(err, &re) {
				return fmt.Errorf("publisher %d: %w", p.index, err)
			}
			p.notAccepted.Add(1)
			p.window.Forget(1) // never sent to the peers: no subscriber gets it
			continue
		}
		p.accepted.Add(1)
		if r.due >= p.win.measureFrom {
			p.measured.Add(1)
		}
		if p.latest != nil {
			p.latest.raise(keyIndex(r.seq, p.index, p.cfg.Publishers, p.cfg.Keys), res.Version)
		}
	}
	return nil
}
