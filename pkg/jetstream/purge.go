package jetstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Delete markers are purged after Config.TombstoneTTL, as the node collects its
// tombstones: by the server itself where it has per-message TTLs (nats-server 2.11
// on: the stream allows them and a marker carries a Nats-TTL header), else by the
// sidecars (purger): the feed notes each marker it applies, and once the marker is
// older than the TTL its origin's sidecar purges it (any sidecar, once it is twice
// as old: its origin may be gone). A purge removes the key's messages below the
// marker's sequence and the marker, so it never removes a newer write of the key.

// minTombstoneTTL is the shortest TTL a server takes in a Nats-TTL header.
const minTombstoneTTL = time.Second

// markersBytes bounds the delete markers a sidecar remembers for the periodic
// purge, in the bytes of their subjects and fields: 1 MiB, about 10,000 markers
// of short keys. Past it a marker is not noted (counted): another sidecar, or this
// one's next snapshot at start, purges it.
const markersBytes = 1 << 20

// marker is a delete marker the feed applied.
type marker struct {
	subject string
	seq     uint64
	stored  time.Time // the server's time of the message
	own     bool      // this node wrote it
}

func (m *marker) bytes() int { return len(m.subject) + 48 }

// markers are the delete markers the feed applied, in stream order (so oldest first,
// up to the servers' clocks), for the purger.
type markers struct {
	mu sync.Mutex
	// q is the markers not yet purged, oldest first; bytes their bytes. Guarded by
	// mu. Invariant: bytes <= markersBytes.
	q     []marker
	bytes int
	// dropped counts markers not noted (over markersBytes); purged those purged,
	// failed the purges that failed (retried at the next round).
	dropped, purged, failed atomic.Uint64
}

// add notes a marker (the feed).
func (k *markers) add(subject string, seq uint64, stored time.Time, own bool) {
	m := marker{subject: subject, seq: seq, stored: stored, own: own}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.bytes+m.bytes() > markersBytes {
		k.dropped.Add(1)
		return
	}
	k.q = append(k.q, m)
	k.bytes += m.bytes()
}

// due returns the oldest marker this node should purge at now, if any: older than
// ttl and its own, or older than twice ttl. Markers behind it are younger.
func (k *markers) due(now time.Time, ttl time.Duration) (marker, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.q) == 0 {
		return marker{}, false
	}
	m := k.q[0]
	age := now.Sub(m.stored)
	return m, age > 2*ttl || (age > ttl && m.own)
}

// pop removes the oldest marker (after due returned it and its purge succeeded).
func (k *markers) pop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.bytes -= k.q[0].bytes()
	k.q[0] = marker{}
	k.q = k.q[1:]
}

// purgeEvery is the purger's round: a quarter of the TTL, within 1 s..1 min, so that
// a marker outlives its TTL by at most that much.
func purgeEvery(ttl time.Duration) time.Duration { return min(max(ttl/4, time.Second), time.Minute) }

// purger purges the due markers every purgeEvery until ctx ends (the transport's
// goroutine, on a server without per-message TTLs).
func (t *Transport) purger(st *stream) {
	tick := time.NewTicker(purgeEvery(t.cfg.TombstoneTTL))
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		for {
			m, ok := t.markers.due(t.cfg.Now(), t.cfg.TombstoneTTL)
			if !ok {
				break
			}
			ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
			// Everything of the key below the marker's sequence and the marker:
			// never a newer message of the key.
			err := st.s.Purge(ctx, jetstream.WithPurgeSubject(m.subject), jetstream.WithPurgeSequence(m.seq+1))
			cancel()
			if err != nil {
				if rare(t.markers.failed.Add(1)) {
					t.cfg.Logger.Warn("jetstream: purging a delete marker failed; retrying at the next round", "subject", m.subject,
						"seq", m.seq, "err", err, "failures", t.markers.failed.Load())
				}
				break
			}
			t.markers.pop()
			t.markers.purged.Add(1)
		}
	}
}
