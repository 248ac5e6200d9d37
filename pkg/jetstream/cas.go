package jetstream

import "github.com/fanout/fanout/pkg/state"

// The last-writer-wins decision, kept by the engine: a deterministic core. The
// stream holds at most one message per key; a publish that expects the key's last
// sequence lands only if no one wrote the key since that sequence was read. So
// publishing an event is a loop of (what the stream holds → what to do):
//
//	cur := current{}                 // optimistic: the key is absent (or a hint)
//	for {
//	    act := c.decide(cur)
//	    switch act.verdict {
//	    case publish: err := publish(expect act.seq); wrong sequence → cur = directGet(key); continue
//	    default: return act.verdict  // stored, stale, or gaveUp
//	    }
//	}
//
// The I/O (the publish, the direct get) is the caller's (casPublisher); the core
// only decides, so a reference model checks it (cas_test.go).

// current is what the stream holds for a key, as last read.
type current struct {
	// present: the key has a message. Invariant: !present implies seq == 0 and a
	// zero stamp.
	present bool
	// stamp is the message's (version, origin); the zero stamp for a message known
	// to be older than any event: one that is not this transport's (foreign: `nats
	// kv put`, a purge marker), or a feed's hint (Transport.hint).
	stamp state.Stamp
	// seq is the message's stream sequence: what the next publish expects.
	seq uint64
}

// verdict is what to do with an event, given the key's current message.
type verdict int

const (
	// publish the event, expecting the key's last sequence to be decision.seq (0:
	// the key has no message).
	publish verdict = iota
	// stored: the stream holds this very event (same version and origin): a
	// publish whose ack was lost, or a repeat. The event is acknowledged.
	stored
	// stale: the stream holds a newer (version, origin): the event lost. It is
	// acknowledged as STALE, as a peer answers on the mesh.
	stale
	// gaveUp: every attempt met a conflict (casConfig.maxAttempts). The event is
	// not in the stream; the caller fails it (the key is hot).
	gaveUp
)

func (v verdict) String() string {
	switch v {
	case publish:
		return "publish"
	case stored:
		return "stored"
	case stale:
		return "stale"
	case gaveUp:
		return "gave up"
	}
	return "verdict(?)"
}

// decision is a verdict, and for publish the sequence to expect.
type decision struct {
	verdict verdict
	seq     uint64
}

// cas is one event's way into the stream: the decisions of its attempts.
type cas struct {
	ev state.Stamp
	// attempts is the publishes decided so far. Invariant: attempts <= max.
	attempts int
	// max bounds attempts (>= 1): past it a conflict gives up.
	max int
	// conflicts is the publishes that met a wrong last sequence (attempts - 1 while
	// the loop runs, counted by the caller's metrics).
	conflicts int
}

func newCAS(ev state.Stamp, maxAttempts int) *cas {
	return &cas{ev: ev, max: max(maxAttempts, 1)}
}

// decide is what to do given the key's current message: stale if it is newer than
// the event, stored if it is the event, else publish expecting its sequence — unless
// the attempts are spent.
func (c *cas) decide(cur current) decision {
	switch {
	case cur.present && cur.stamp == c.ev:
		return decision{verdict: stored}
	case cur.present && cur.stamp.Newer(c.ev):
		return decision{verdict: stale}
	case c.attempts == c.max:
		return decision{verdict: gaveUp}
	}
	c.attempts++
	return decision{verdict: publish, seq: cur.seq}
}

// conflict records that the last publish met a wrong last sequence: the caller
// reads the key again and decides again.
func (c *cas) conflict() { c.conflicts++ }
