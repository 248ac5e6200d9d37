package fanout

import (
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
	if v > wallVersion(c.now().Add(maxObservedSkew)) {
		return
	}
	c.raise(v)
}

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
// holds a key for at most this long: after that the clock's own versions pass it.
// App counters (1, 2, 3, ...) are far below the bound; unix nanoseconds are above it.
const (
	// maxAppAhead bounds the versions an app submits: the HLC's own skew allowance.
	maxAppAhead = maxObservedSkew
	// maxPeerAhead bounds the versions a peer replicates: the origin checked them
	// against its own clock, so this allows for the two clocks' skew on top. A
	// version above it is answered INVALID.
	maxPeerAhead = maxObservedSkew + 4*time.Minute
)

// maxVersion is the highest version accepted at now with the given allowance.
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
