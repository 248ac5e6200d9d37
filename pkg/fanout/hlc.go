package fanout

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// logicalBits is the width of the logical counter in a version: milliseconds since the
// Unix epoch sit above it. 16 bits give 65536 versions per millisecond before the
// counter carries into the millisecond field (which keeps it monotonic regardless).
const logicalBits = 16

// maxObservedSkew bounds how far ahead of our wall clock a remote version may pull our
// clock. App-chosen versions (small counters, or huge numbers) must not drag the clock
// into the far future; real peer clocks are within seconds of ours.
const maxObservedSkew = time.Minute

// hlc is a hybrid logical clock: versions are wall-clock milliseconds in the high bits
// and a logical counter in the low bits. It is monotonic on this node even when the
// wall clock steps back, and stays close to wall time. Safe for concurrent use.
type hlc struct {
	last atomic.Uint64 // highest version handed out or observed
	now  func() time.Time

	// With --data-dir, versions are leased: cover saves a mark at or above every
	// version before it leaves the node (extend: the store's RaiseClock), so that a
	// restarted node, whose clock starts at the saved mark, never hands out a version
	// it had already sent, even one that was never committed. leased is the saved
	// mark; leaseMu serializes extensions. extend nil: no lease (memory only).
	leased  atomic.Uint64
	leaseMu sync.Mutex
	extend  func(upTo uint64) error
}

// leaseAhead is how far past the wall clock a lease reaches: versions that follow
// the wall clock extend it about once a second, one fsync.
const leaseAhead = time.Second

// cover makes sure the lease reaches v: it returns at once if it does, and saves a
// new mark (v, or a second past the wall clock if that is higher) if not.
func (c *hlc) cover(v uint64) error {
	if c.extend == nil || v <= c.leased.Load() {
		return nil
	}
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	if v <= c.leased.Load() {
		return nil
	}
	to := max(v, wallVersion(c.now().Add(leaseAhead)))
	if err := c.extend(to); err != nil {
		return err
	}
	c.leased.Store(to)
	return nil
}

// reserve hands out n consecutive versions and returns the first.
func (c *hlc) reserve(n int) uint64 {
	for {
		old := c.last.Load()
		first := max(wallVersion(c.now()), old+1)
		if c.last.CompareAndSwap(old, first+uint64(n)-1) {
			return first
		}
	}
}

// observe moves the clock past a version seen from a peer, so a later local write of
// the same task wins over it (the HLC receive rule). Versions further ahead than
// maxObservedSkew are ignored.
func (c *hlc) observe(v uint64) {
	c.observeUnder(v, observeLimit(c.now()))
}

// observeUnder is observe with the limit of observeLimit(now) given, for a caller that
// observes many versions at one now (a Replicate request): one clock read, not one
// per event.
func (c *hlc) observeUnder(v, limit uint64) {
	if v > limit {
		return
	}
	c.raise(v)
}

// observeLimit is the highest version observe moves the clock to at now.
func observeLimit(now time.Time) uint64 { return wallVersion(now.Add(maxObservedSkew)) }

// restore moves the clock to at least v, with no skew bound: v is this node's own
// persisted high-water mark (--data-dir), which its versions must never go below.
func (c *hlc) restore(v uint64) {
	c.leased.Store(max(c.leased.Load(), v))
	c.raise(v)
}

// raise moves the clock to at least v.
func (c *hlc) raise(v uint64) {
	for {
		old := c.last.Load()
		if v <= old || c.last.CompareAndSwap(old, v) {
			return
		}
	}
}

// How far ahead of this node's clock a version may be. A version is the last-writer-
// wins order, so one far in the future would win every later write of its key on
// every node (2^64-1 would freeze the key for good). Bounding it means a bad write
// holds a key for at most this long over writes of its own scheme: after that, the
// writers' versions pass it.
const (
	// maxAppAhead bounds the versions an app submits: the HLC's own skew allowance.
	maxAppAhead = maxObservedSkew
	// maxPeerAhead bounds the versions a peer replicates or anti-entropy brings: the
	// origin checked them against its own clock, so this allows for the two clocks'
	// skew on top. A version above it is answered INVALID.
	maxPeerAhead = maxObservedSkew + 4*time.Minute
)

// Versions fall in two bands, told apart by value alone, so that the rule needs
// nothing on the wire or in the state table and holds the same on every path (Submit,
// Replicate, anti-entropy, the data dir):
//
//   - below nanosBand: the sidecar's own versions (milliseconds << 16, ~1.2e17 in
//     2026) and every small scheme an app may use instead (counters, Unix seconds,
//     milliseconds, microseconds: all below the clock's current versions). Bounded
//     by the clock: at most the skew allowance ahead of wallVersion(now).
//   - from nanosBand up: Unix nanoseconds (~1.8e18 in 2026), an app's other common
//     choice. Bounded the same way on their own scale: at most the skew allowance
//     ahead of now.UnixNano().
//
// nanosBand is 2000-01-01 in Unix nanoseconds, 9.47e17: no Unix-nanosecond clock of
// a running system is below it, and the sidecar's versions reach it only in the year
// 2427 (TestVersionBands). A version between the two bounds (a clock-scale version
// too far ahead, or a nanosecond one from before 2000) and one past the nanosecond
// bound (2^64-1) are refused, and counted (fanout_versions_refused_total).
//
// The clock moves only past versions within its own skew allowance (observe), so
// nanosecond versions never drag it: the sidecar's own versions stay in their band.
// One key should keep one scheme: any nanosecond version outranks every version of
// the lower band, so a key moved to nanoseconds stays there.
const nanosBand = uint64(946684800) * uint64(time.Second)

// versionBound is the highest version each band accepts at one instant, computed once
// per request.
type versionBound struct{ clock, nanos uint64 }

func newVersionBound(now time.Time, ahead time.Duration) versionBound {
	return versionBound{clock: maxVersion(now, ahead), nanos: uint64(now.Add(ahead).UnixNano())}
}

// allows reports whether v is a valid version: not 0, and within its band's bound.
func (b versionBound) allows(v uint64) bool {
	if v < nanosBand {
		return v != 0 && v <= b.clock
	}
	return v <= b.nanos
}

// explain says why b refuses v, naming the accepted ranges.
func (b versionBound) explain(v uint64, ahead time.Duration) string {
	if v == 0 {
		return "0 is not a version"
	}
	return fmt.Sprintf("%d is more than %s ahead of this node's clock: a version is at most %d (the sidecar's scale, "+
		"Unix milliseconds << %d; counters and Unix seconds, milliseconds or microseconds are below it) or, from %d, "+
		"at most %d (Unix nanoseconds)", v, ahead, b.clock, logicalBits, nanosBand, b.nanos)
}

// maxVersion is the highest version of the sidecar's scale accepted at now with the
// given allowance.
func maxVersion(now time.Time, ahead time.Duration) uint64 {
	return wallVersion(now.Add(ahead)) | (1<<logicalBits - 1)
}

// wallVersion is the smallest version of the millisecond t falls in.
func wallVersion(t time.Time) uint64 {
	ms := t.UnixMilli()
	if ms < 0 {
		return 0
	}
	return uint64(ms) << logicalBits
}
