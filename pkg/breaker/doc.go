// Package breaker is the circuit breaker in front of each peer, a small seam
// over github.com/sony/gobreaker/v2.
//
// # Life of a breaker
//
// The fanout node makes one Breaker per peer with New. Every Replicate call of that
// peer's batcher workers runs inside Breaker.Do. The caller's Config.IsFailure says
// which errors are failures: fanout counts network failures only (the peer could not
// be reached). Congestion is excluded, neither success nor failure: an overloaded peer
// is alive, and the traffic shaper already slows down for it. Every other outcome is a
// success: the peer answered.
//
// Closed: calls go through. After Config.Failures consecutive failures the breaker
// trips to open.
//
// Open: Do refuses at once with ErrOpen, for Config.OpenFor. Meanwhile Hold reports the
// time left, and the batcher consults it (as its Gate) before dispatching, so pending
// events stay in pending, coalescing and bounded, instead of being sent into a dead
// peer and handed back.
//
// Half-open: after OpenFor, Config.Probes calls go through as probes; further calls get
// ErrOpen. If the probes succeed the breaker closes; one failure re-opens it for
// another OpenFor.
//
// State changes are reported through Config.OnStateChange (fanout logs them) and by
// State, which GetStatus shows as "closed", "open" or "half-open".
//
// Only this package touches gobreaker. Others depend on the Breaker interface, and
// their tests use Fake.
package breaker
