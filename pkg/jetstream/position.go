package jetstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/state"
	"github.com/nats-io/nats.go/jetstream"
)

// Checkpoint keeps the transport's position across restarts: *store.Store (the
// sidecar's --data-dir), which syncs each save. An older position is always safe
// (the feed reads again, the outbox publishes again, what it may have done), so a
// save may be skipped or fail.
type Checkpoint interface {
	TransportPosition() ([]byte, error)
	SetTransportPosition([]byte) error
}

// position is how far this node got with the stream, saved every saveEvery.
//
// Invariants, as saved: the node's table holds on disk everything the feed applied
// up to Seq; every message after Seq was stored at or after Since; every event this
// node accepted before Unpublished has its fate at the stream.
type position struct {
	// Version is the encoding's: 1. Another is refused (a newer sidecar's).
	Version int `json:"v"`
	// Stream and Created name the stream's history: a stream deleted and made
	// again under the same name is another one, whose sequences mean nothing here.
	Stream  string    `json:"stream"`
	Created time.Time `json:"created"`
	// Seq is the last sequence the feed applied; Since, when every message after it
	// was stored at or after.
	Seq   uint64    `json:"seq"`
	Since time.Time `json:"since"`
	// Unpublished is the outbox's mark: this node's events accepted before it are
	// in the stream (or lost to a newer write); the ones the table holds from it on
	// are published again at start.
	Unpublished time.Time `json:"unpublished"`
}

// positionVersion is the encoding's version.
const positionVersion = 1

// saveEvery is how often the position is saved: a restarted node reads again at
// most this much more than it must (and its outbox mark is this much older).
const saveEvery = time.Second

// markStep is how far the outbox's mark moves on before it is saved again on its
// own (a save is an fsync): the older saved mark costs a restart the puts of at
// most this much more of its own events, found stored.
const markStep = 30 * time.Second

// markMargin is how much older than the oldest unpublished event the outbox's mark
// is saved: events accepted while the mark was taken, and host clock steps back of
// up to this much, are still published again after a restart.
const markMargin = time.Minute

func encodePosition(p position) ([]byte, error) {
	p.Version = positionVersion
	return json.Marshal(p)
}

// decodePosition reads a saved position, refusing anything encodePosition does not
// write: unknown fields, another version, no stream, a sequence without a time.
func decodePosition(b []byte) (position, error) {
	var p position
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return position{}, fmt.Errorf("jetstream: saved position: %w", err)
	}
	if d.More() {
		return position{}, fmt.Errorf("jetstream: saved position: data after the position")
	}
	switch {
	case p.Version != positionVersion:
		return position{}, fmt.Errorf("jetstream: saved position: version %d, this sidecar reads %d (written by a newer one?)", p.Version, positionVersion)
	case p.Stream == "" || len(p.Stream) > len("KV_")+maxBucketBytes:
		return position{}, fmt.Errorf("jetstream: saved position: stream %q", p.Stream)
	case p.Seq > 0 && p.Since.IsZero():
		return position{}, fmt.Errorf("jetstream: saved position: sequence %d without its time", p.Seq)
	}
	return p, nil
}

// loadPosition reads the saved position; ok is false if there is none or it cannot
// be read (logged: the feed then takes the snapshot and the outbox publishes every
// event of this node in the table again, which is safe).
func (t *Transport) loadPosition() (position, bool) {
	b, err := t.cfg.Checkpoint.TransportPosition()
	if err == nil && b == nil {
		return position{}, false
	}
	var p position
	if err == nil {
		p, err = decodePosition(b)
	}
	if err != nil {
		t.cfg.Logger.Warn("jetstream: the data dir's position cannot be read; reading the stream's snapshot", "err", err)
		return position{}, false
	}
	return p, true
}

// resumeFrom is where the feed starts, given the saved position p (ok) and the
// stream's info: after p.Seq if p is of this stream and no delete marker after it
// can have been purged yet, else the snapshot. It says why in the log.
func (t *Transport) resumeFrom(p position, ok bool, info *jetstream.StreamInfo) feedStart {
	why := ""
	// A marker stored after Since is purged no earlier than Since + the TTL; the
	// margin covers the servers' clocks against this host's.
	margin := min(markMargin, t.cfg.TombstoneTTL/4)
	switch {
	case !ok || p.Seq == 0:
		return feedStart{}
	case p.Stream != info.Config.Name || !p.Created.Equal(info.Created):
		why = "the stream was made again since"
	case p.Seq > info.State.LastSeq:
		why = "the stream has fewer messages than this node applied"
	case t.cfg.Now().After(p.Since.Add(t.cfg.TombstoneTTL - margin)):
		why = "delete markers after the saved sequence may have been purged (--tombstone-ttl)"
	default:
		t.cfg.Logger.Info("jetstream: resuming the stream", "stream", info.Config.Name, "from", p.Seq+1, "last", info.State.LastSeq)
		return feedStart{from: p.Seq + 1, since: p.Since}
	}
	t.cfg.Logger.Info("jetstream: reading the stream's snapshot instead of resuming", "stream", info.Config.Name, "saved", p.Seq, "why", why)
	return feedStart{}
}

// republish queues again this node's events in the table accepted at or after the
// saved outbox mark (all of them without a position): they may not have reached the
// stream before the restart. One that did is found stored (or stale) by its first
// put. It returns how many.
func (t *Transport) republish(p position, ok bool) int {
	var from int64
	if ok {
		from = p.Unpublished.UnixNano()
	}
	self := t.node.ID()
	tb := t.node.Table()
	s := &state.Scan{Deletions: true, PastCompaction: true, MaxEntries: 1024,
		Keep: func(e *state.Entry) bool { return e.Stamp.Origin == self && e.Submitted >= from }}
	n := 0
	var buf []state.Entry
	for {
		buf, _ = tb.Next(s, buf[:0])
		if len(buf) == 0 {
			return n
		}
		for i := range buf {
			e := &buf[i]
			task := &batcher.Task[wire.Outgoing]{ID: string(e.Key), Value: wire.Outgoing{Raw: bytes.Clone(e.Raw), Version: e.Stamp.Version},
				Submitted: time.Unix(0, e.Submitted)}
			if f, ok := t.ob.push(task); !ok {
				t.finish(task, f)
				continue
			}
			n++
		}
	}
}

// keepPosition saves the position every saveEvery until the transport closes, and
// once more then: the feed's sequence once the table's changes up to it are on disk
// (a candidate taken at one save is saved at a later one), the outbox's mark.
func (t *Transport) keepPosition(info *jetstream.StreamInfo) {
	tick := time.NewTicker(saveEvery)
	defer tick.Stop()
	type candidate struct {
		seq   uint64
		since time.Time
		rev   uint64 // the table's revision when seq was the feed's
	}
	var saved, next candidate
	fd := t.fd.Load()
	saved.seq, saved.since = fd.position()
	var wroteSeq uint64
	var wroteMark time.Time
	for stop := false; !stop; {
		select {
		case <-t.ctx.Done():
			stop = true
		case <-tick.C:
		}
		if next.seq > saved.seq && t.node.Durable() >= next.rev {
			saved = next
		}
		seq, since := fd.position()
		if seq > saved.seq && seq > next.seq {
			next = candidate{seq: seq, since: since, rev: t.node.Table().Revision()}
		}
		mark := t.outboxMark()
		if wroteSeq == saved.seq && (mark.Equal(wroteMark) || (mark.After(wroteMark) && mark.Sub(wroteMark) < markStep)) {
			continue // an older mark is safe: save it again only once it moved a step
		}
		b, err := encodePosition(position{Stream: info.Config.Name, Created: info.Created, Seq: saved.seq, Since: saved.since, Unpublished: mark})
		if err == nil {
			err = t.cfg.Checkpoint.SetTransportPosition(b)
		}
		if err != nil {
			if rare(t.saveErrs.Add(1)) {
				t.cfg.Logger.Warn("jetstream: saving the position to the data dir failed", "err", err, "failures", t.saveErrs.Load())
			}
			continue
		}
		wroteSeq, wroteMark = saved.seq, mark
		t.savedSeq.Store(saved.seq)
		t.saves.Add(1)
	}
}

// outboxMark is the outbox's mark to save now: markMargin before the oldest event
// queued or in flight, or before now if there is none.
func (t *Transport) outboxMark() time.Time {
	now := t.cfg.Now()
	oldest := t.ob.oldest(now)
	return oldest.Add(-markMargin).Truncate(time.Second)
}
