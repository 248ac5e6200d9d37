package state

import (
	"errors"
	"hash/maphash"
	"sync"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/fanout/fanout/pkg/configerr"
)

// Config bounds a table. It is copied by New.
type Config struct {
	// MaxKeys bounds the keys that are not deleted (--state-max-keys). Tombstones
	// have a bound of their own, so that a delete makes room at once.
	MaxKeys int
	// MaxBytes bounds the event bytes of the keys that are not deleted
	// (--state-max-bytes).
	MaxBytes int64
	// MaxTombstones bounds the tombstones (--state-max-tombstones). At the bound a
	// new tombstone collects the oldest ones first, before TombstoneTTL (doc.go,
	// "Bounds"). 0: as many as MaxKeys.
	MaxTombstones int
	// MaxTombstoneBytes bounds the tombstones' event bytes
	// (--state-max-tombstone-bytes). 0: a quarter of MaxBytes.
	MaxTombstoneBytes int64
	// OwnReservePercent is the share of MaxKeys and MaxBytes, in percent, kept for
	// the writes marked Own (the node's own app's): a write from a peer adds a key,
	// or grows the bytes, only within the rest (doc.go, "Bounds"). 0: no reserve.
	OwnReservePercent int
	// TombstoneTTL is how long a deleted key is remembered (--tombstone-ttl).
	TombstoneTTL time.Duration
	// FirstRevision: the table's revisions start above it. A node passes a value
	// derived from its start time, so that a revision handed out before a restart is
	// never mistaken for one of the new table's (Resume refuses it as compacted).
	FirstRevision uint64
	// Collected, if set, is called with the key of each tombstone the table forgets
	// (by Collect, or by a Put at a bound), under the table's lock: it must copy what
	// it keeps and must not call the table. The --data-dir writer deletes them.
	Collected func(key []byte)
}

// DefaultConfig returns the defaults of the sidecar's flags, each with its reason.
func DefaultConfig() Config {
	return Config{
		// The version table this replaces remembered 1,000,000 task_ids. A million
		// keys of ~140 event bytes are a 231 MiB heap (docs/BENCHMARKS.md).
		MaxKeys: 1_000_000,
		// 512 MiB of event bytes: a million keys of ~500 bytes. Above it a sidecar
		// is no longer a small process next to its app.
		MaxBytes: 512 << 20,
		// As many tombstones as keys: deleting every key of a full table keeps every
		// tombstone for its TTL; only more deletes than that collect some early.
		MaxTombstones: 1_000_000,
		// A deletion needs its task_id and version, not a payload: a million
		// tombstones of up to 134 bytes.
		MaxTombstoneBytes: 128 << 20,
		// 10 %: when its peers' writes, or a flood they relay, fill the rest, the
		// node's own app keeps 100,000 keys and 51 MiB at the default bounds to go on
		// writing new keys while its operator reacts to fanout_state_keys (deletes
		// make room at once). Small enough that a healthy cluster, where every node
		// holds every key, loses little: the peers' keys fill up to 90 % of the bound.
		OwnReservePercent: 10,
		// A day: longer than any partition or rolling deploy a peer can be away
		// for and still hold the pre-delete state, which would then come back.
		TombstoneTTL: 24 * time.Hour,
	}
}

func (c Config) validate() error {
	var errs []error
	if c.MaxKeys <= 0 || c.MaxKeys > maxEntries {
		errs = append(errs, configerr.New("state.Config.MaxKeys", "must be 1..%d, got %d", maxEntries, c.MaxKeys))
	}
	if c.MaxBytes <= 0 {
		errs = append(errs, configerr.New("state.Config.MaxBytes", "must be > 0, got %d", c.MaxBytes))
	}
	if c.MaxTombstones < 0 || c.MaxTombstones > maxEntries-max(c.MaxKeys, 0) {
		errs = append(errs, configerr.New("state.Config.MaxTombstones", "must be 0..%d (with MaxKeys, at most %d entries), got %d",
			maxEntries-max(c.MaxKeys, 0), maxEntries, c.MaxTombstones))
	}
	if c.MaxTombstoneBytes < 0 {
		errs = append(errs, configerr.New("state.Config.MaxTombstoneBytes", "must be >= 0, got %d", c.MaxTombstoneBytes))
	}
	if c.OwnReservePercent < 0 || c.OwnReservePercent > 90 {
		errs = append(errs, configerr.New("state.Config.OwnReservePercent", "must be 0..90, got %d", c.OwnReservePercent))
	}
	if c.TombstoneTTL <= 0 {
		errs = append(errs, configerr.New("state.Config.TombstoneTTL", "must be > 0, got %s", c.TombstoneTTL))
	}
	return errors.Join(errs...)
}

// withDefaults fills the tombstone bounds left 0.
func (c Config) withDefaults() Config {
	if c.MaxTombstones == 0 {
		c.MaxTombstones = c.MaxKeys
	}
	if c.MaxTombstoneBytes == 0 {
		c.MaxTombstoneBytes = max(c.MaxBytes/4, 1)
	}
	return c
}

// peerKeys and peerBytes are the bounds a write that is not Own stays within.
func (c Config) peerKeys() int    { return c.MaxKeys - c.MaxKeys*c.OwnReservePercent/100 }
func (c Config) peerBytes() int64 { return c.MaxBytes - c.MaxBytes*int64(c.OwnReservePercent)/100 }

// maxEntries keeps entry indexes below the none marker.
const maxEntries = 1<<31 - 1

// Stamp is a version with the node that wrote it. Stamps order lexicographically by
// (version, origin): the last-writer-wins rule.
type Stamp struct {
	Version uint64
	Origin  string
}

// Newer reports whether s wins over o.
func (s Stamp) Newer(o Stamp) bool {
	return s.Version > o.Version || (s.Version == o.Version && s.Origin > o.Origin)
}

// Write is one change offered to the table.
type Write struct {
	// Key is the task_id. It must be the bytes of Raw at KeyOffset.
	Key       []byte
	KeyOffset int
	// Raw is the event as encoded (fanout.v1.Event). The table copies it if the
	// write wins; the caller may reuse it afterwards.
	Raw       []byte
	Stamp     Stamp
	Submitted int64 // unix nanos at the origin
	Deleted   bool
	// Own marks a write of the node's own app (Submit), or one it restores from its
	// own disk: it may take the share of the bounds kept by OwnReservePercent. A
	// write from a peer (replicated, or brought by anti-entropy) may not.
	Own bool
}

// Outcome is what Put did with a write.
type Outcome int

const (
	// Applied: the write is the key's latest state now, at Result.Revision.
	Applied Outcome = iota
	// Stale: the key holds Result.Current, which is this write's stamp or newer.
	Stale
	// Full: the write would take the table past MaxKeys or MaxBytes (less the
	// reserve, for a write that is not Own), or it is a tombstone bigger than
	// MaxTombstoneBytes.
	Full
)

// Result is the outcome of Put.
type Result struct {
	Outcome  Outcome
	Revision uint64 // Applied
	Current  Stamp  // Stale
	// Added: Applied, and the key was not live before (absent, or a tombstone).
	Added bool
}

// Entry is a key's state as read. Raw and Key alias the table's arena and stay valid
// and unchanged for as long as the caller keeps them.
type Entry struct {
	Key       []byte
	Raw       []byte
	Stamp     Stamp
	Submitted int64
	Revision  uint64
	Deleted   bool
}

// Stats is a snapshot of the table's gauges and counters.
type Stats struct {
	Keys, Tombstones int   // keys not deleted; tombstones (deleted keys remembered)
	Bytes            int64 // event bytes of the keys not deleted
	TombstoneBytes   int64 // event bytes of the tombstones
	ArenaBytes       int64 // the arena's slabs, live and dead records
	LogSlots         int   // revision log slots, live and dead
	Revision         uint64
	Compacted        uint64 // the oldest revision a Resume may start from
	// Refused counts writes refused at a bound (Full), RefusedPeer those of them
	// that were not Own.
	Refused, RefusedPeer, StaleSeen uint64
	Collected                       uint64 // tombstones removed after TombstoneTTL
	// CollectedEarly counts tombstones removed before TombstoneTTL, to make room
	// for newer ones at MaxTombstones or MaxTombstoneBytes.
	CollectedEarly uint64
}

// none marks "no entry".
const none = ^uint32(0)

// entry is one key's state. It holds no pointer: a million entries cost the garbage
// collector nothing to scan. 56 bytes.
type entry struct {
	version   uint64
	rev       uint64 // 0 while the entry is free
	submitted int64
	slab, off uint32 // the record in the arena; off is where Raw starts
	size      uint32 // len(Raw)
	keyOff    uint32 // the key's offset in Raw
	keyLen    uint32
	origin    uint32 // in origins
	chunk     uint32 // the revision log chunk of rev
	deleted   bool
	leaf      uint16 // the digest leaf of the key (digest.go); in what was padding
}

// pageSize entries per page: the entries grow by pages, never by copying.
const pageBits, pageSize = 12, 1 << 12

// tomb is a tombstone waiting for collection, in the order they were made.
type tomb struct {
	rev uint64
	at  int64 // when it was applied here, unix nanos
	ent uint32
}

// Table is a node's state table: the latest event of every key, by last-writer-wins,
// each change numbered by a rising revision. Safe for concurrent use: one mutex guards
// everything, and no call holds it for more than one bounded step (a scan step, a
// chunk or slab compaction).
type Table struct {
	cfg  Config
	hash func(key []byte) uint64 // maphash with a seed of the table's own

	mu       sync.Mutex
	index    index // guarded by mu: key hash -> entry
	pages    []*[pageSize]entry
	nents    uint32   // entries ever allocated (free ones included)
	freeEnts []uint32 // guarded by mu: entries to reuse
	arena    arena
	log      revlog
	origins  origins
	// digest is the tree of entry hashes (digest.go). Invariant: every leaf is the
	// XOR of the entryHash of the entries (rev != 0) whose leaf it is.
	digest digestTree
	tombs  []tomb // guarded by mu: oldest first; may name entries changed since
	// staleTombs counts the tombs that no longer name their entry. Invariant:
	// len(tombs) == Tombstones + staleTombs; tombs is filtered when staleTombs
	// outgrows the rest, so a key deleted and written again all day costs nothing.
	staleTombs int
	rev        uint64 // guarded by mu: the latest revision
	st         Stats  // guarded by mu: Keys, Tombstones, Bytes and the counters
	// changed is closed at the next change once a reader waits on it (waiting).
	changed chan struct{}
	waiting bool
	closed  chan struct{} // always closed: Changed's answer when there is news
}

// New returns an empty table.
func New(cfg Config) (*Table, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Table{
		cfg:     cfg,
		hash:    hasher(maphash.MakeSeed()),
		arena:   newArena(),
		origins: newOrigins(),
		digest:  newDigestTree(),
		rev:     cfg.FirstRevision,
		changed: make(chan struct{}),
		closed:  make(chan struct{}),
	}
	close(t.closed)
	t.st.Compacted = cfg.FirstRevision
	return t, nil
}

func hasher(seed maphash.Seed) func([]byte) uint64 {
	return func(b []byte) uint64 { return maphash.Bytes(seed, b) }
}

func (t *Table) ent(i uint32) *entry { return &t.pages[i>>pageBits][i&(pageSize-1)] }

// find returns the entry of key, or none. Caller holds mu.
func (t *Table) find(h uint64, key []byte) uint32 {
	return t.index.find(h, func(i uint32) bool { return string(t.keyOf(t.ent(i))) == string(key) })
}

func (t *Table) keyOf(e *entry) []byte {
	raw := t.arena.bytes(e.slab, e.off, e.size)
	return raw[e.keyOff : e.keyOff+e.keyLen]
}

// Put applies w if it is newer than the key's entry, within the bounds. A tombstone
// at MaxTombstones or MaxTombstoneBytes collects the oldest tombstones first.
func (t *Table) Put(w *Write, now time.Time) Result {
	h := t.hash(w.Key)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.put(h, w, now)
}

// PutBatchStep bounds the writes PutBatch applies under one hold of the lock (a caller
// that gathers writes gathers this many per call, as pkg/fanout's eventStore does): a
// batch of a peer's (100 by default) in one, and no reader waits for more than about
// 64 writes' worth (tens of microseconds).
const PutBatchStep = 64

// PutBatch applies ws in order, exactly as that many calls of Put would (the same
// Results, revisions, bounds, tombstones and digest), and appends their Results to
// rs. It hashes a step's keys before it takes the lock and holds the lock once per
// step of up to PutBatchStep writes, not once per write. Writes of one batch may
// name the same key: each is judged against the table as the ones before it left it.
func (t *Table) PutBatch(ws []Write, now time.Time, rs []Result) []Result {
	var hs [PutBatchStep]uint64
	for len(ws) > 0 {
		step := ws[:min(len(ws), PutBatchStep)]
		for i := range step {
			hs[i] = t.hash(step[i].Key)
		}
		t.mu.Lock()
		for i := range step {
			rs = append(rs, t.put(hs[i], &step[i], now))
		}
		t.mu.Unlock()
		ws = ws[len(step):]
	}
	return rs
}

// put applies w, whose key hashes to h, and counts a refusal. Caller holds mu.
func (t *Table) put(h uint64, w *Write, now time.Time) Result {
	r := t.apply(h, w, now)
	if r.Outcome == Full {
		t.st.Refused++
		if !w.Own {
			t.st.RefusedPeer++
		}
	}
	return r
}

func (t *Table) apply(h uint64, w *Write, now time.Time) Result {
	i := t.find(h, w.Key)
	var old *entry
	if i != none {
		old = t.ent(i)
		if cur := t.stampOf(old); !w.Stamp.Newer(cur) {
			t.st.StaleSeen++
			return Result{Outcome: Stale, Current: cur}
		}
	} else if w.Deleted && w.Submitted != 0 && w.Submitted <= now.Add(-t.cfg.TombstoneTTL).UnixNano() {
		// A deletion older than TombstoneTTL of a key this table does not hold: every
		// table has collected (or will collect) its tombstone; storing it would make it
		// live another TombstoneTTL here and travel back to the others.
		t.st.StaleSeen++
		return Result{Outcome: Stale}
	}
	if !t.fits(old, w) {
		return Result{Outcome: Full}
	}
	added := !w.Deleted && (old == nil || old.deleted)
	// The key's digest hash, once: a replaced entry's key is w.Key, so its old state
	// leaves the digest in the same toggle as the new one enters, and its old record
	// is not read again.
	kh := xxhash.Sum64(w.Key)
	var out uint64
	if i == none {
		i = t.newEntry(h)
	} else {
		out = t.entryDigest(old, kh) // before release unrefs its origin
		t.release(i)
	}
	if w.Deleted {
		t.makeTombRoom(int64(len(w.Raw)), now) // after release: i's own tomb is stale now
	}
	t.set(i, w, now, kh, out)
	t.wake()
	return Result{Outcome: Applied, Revision: t.rev, Added: added}
}

func (t *Table) stampOf(e *entry) Stamp {
	return Stamp{Version: e.version, Origin: t.origins.name(e.origin)}
}

// fits reports whether w can replace old (nil: a new key) within the bounds. A
// tombstone fits if it is not bigger than MaxTombstoneBytes: older tombstones make
// room for it (makeTombRoom). A key that is not live (new, or deleted) is a new key
// for MaxKeys. A write that is not Own stays within the bounds less the reserve; a
// write that does not grow the bytes always fits them.
func (t *Table) fits(old *entry, w *Write) bool {
	size := int64(len(w.Raw))
	if w.Deleted {
		return size <= t.cfg.MaxTombstoneBytes
	}
	maxKeys, maxBytes := t.cfg.MaxKeys, t.cfg.MaxBytes
	if !w.Own {
		maxKeys, maxBytes = t.cfg.peerKeys(), t.cfg.peerBytes()
	}
	live := old != nil && !old.deleted
	grow := size
	if live {
		grow -= int64(old.size)
	}
	return (live || t.st.Keys < maxKeys) && (grow <= 0 || t.st.Bytes+grow <= maxBytes)
}

// makeTombRoom collects the oldest tombstones until one more of size bytes fits
// MaxTombstones and MaxTombstoneBytes. size is at most MaxTombstoneBytes (fits).
func (t *Table) makeTombRoom(size int64, now time.Time) {
	horizon := now.Add(-t.cfg.TombstoneTTL).UnixNano()
	for len(t.tombs) > 0 && (t.st.Tombstones >= t.cfg.MaxTombstones || t.st.TombstoneBytes+size > t.cfg.MaxTombstoneBytes) {
		tb := t.popTomb()
		if !t.forget(tb) {
			continue
		}
		if tb.at <= horizon {
			t.st.Collected++
		} else {
			t.st.CollectedEarly++
		}
	}
}

// newEntry allocates an entry for hash h and puts it in the index.
func (t *Table) newEntry(h uint64) uint32 {
	var i uint32
	if n := len(t.freeEnts); n > 0 {
		i = t.freeEnts[n-1]
		t.freeEnts = t.freeEnts[:n-1]
	} else {
		if t.nents%pageSize == 0 {
			t.pages = append(t.pages, new([pageSize]entry))
		}
		i = t.nents
		t.nents++
	}
	*t.ent(i) = entry{}
	t.index.insert(h, i)
	return i
}

// set stores w, whose key's xxhash is kh, in entry i at the next revision, and
// XORs out into the digest with the new entry's hash (the released entry's hash, or 0
// for a new one). The entry holds nothing (new, or released).
func (t *Table) set(i uint32, w *Write, now time.Time, kh, out uint64) {
	e := t.ent(i)
	t.rev++
	e.version, e.rev, e.submitted, e.deleted = w.Stamp.Version, t.rev, w.Submitted, w.Deleted
	e.slab, e.off = t.arena.alloc(i, w.Raw)
	e.size, e.keyOff, e.keyLen = uint32(len(w.Raw)), uint32(w.KeyOffset), uint32(len(w.Key))
	e.origin = t.origins.ref(w.Stamp.Origin)
	e.leaf = uint16(kh >> (64 - DigestLeafBits))
	t.digest.toggle(uint32(e.leaf), out^t.entryDigest(e, kh))
	var compact *chunk
	e.chunk, compact = t.log.add(t.rev, i)
	if !w.Deleted {
		t.st.Keys++
		t.st.Bytes += int64(len(w.Raw))
	} else {
		t.st.Tombstones++
		t.st.TombstoneBytes += int64(len(w.Raw))
		t.dropStaleTombs()
		// A tombstone's age counts from its origin's clock, not from its arrival here,
		// so that every table forgets it at about the same time (anti-entropy would
		// otherwise hand a collected tombstone back from a table that got it later).
		at := now.UnixNano()
		if w.Submitted != 0 {
			at = min(at, w.Submitted)
		}
		t.pushTomb(tomb{rev: t.rev, at: at, ent: i})
	}
	if compact != nil {
		t.compactChunk(compact)
	}
}

// unset takes entry i out of the digest and releases what it holds.
func (t *Table) unset(i uint32) {
	t.digest.toggle(t.digestOf(t.ent(i))) // before the origin and record are released
	t.release(i)
}

// release releases what entry i holds (its record, log slot and origin) but keeps it
// in the index, for set to fill again. The entry must be out of the digest, or be
// taken out by the set that follows.
func (t *Table) release(i uint32) {
	e := t.ent(i)
	if !e.deleted {
		t.st.Keys--
		t.st.Bytes -= int64(e.size)
	} else {
		t.st.Tombstones--
		t.st.TombstoneBytes -= int64(e.size)
		t.staleTombs++ // its tomb no longer names it
	}
	t.origins.unref(e.origin)
	slab, size, chunk := e.slab, e.size, e.chunk
	e.rev = 0 // its log slot and record are dead from here on
	if id := t.arena.release(slab, size); id != noSlab {
		t.compactSlab(id)
	}
	if c := t.log.kill(chunk); c != nil {
		t.compactChunk(c)
	}
}

// remove takes entry i out of the table.
func (t *Table) remove(i uint32) {
	t.index.remove(t.hash(t.keyOf(t.ent(i))), i) // before unset: the key is in its record
	t.unset(i)
	*t.ent(i) = entry{}
	t.freeEnts = append(t.freeEnts, i)
}

func (t *Table) compactChunk(c *chunk) {
	t.log.compact(c,
		func(rev uint64, ent uint32) bool { return t.ent(ent).rev == rev },
		func(ent, to uint32) { t.ent(ent).chunk = to })
}

// compactSlab moves the live records of slab id to the current slab and drops it.
func (t *Table) compactSlab(id uint32) {
	t.arena.records(id, func(owner, off, n uint32) {
		if owner >= t.nents {
			return
		}
		e := t.ent(owner)
		if e.rev == 0 || e.slab != id || e.off != off {
			return // dead: the owner was changed, removed or reused since
		}
		raw := t.arena.bytes(id, off, n)
		e.slab, e.off = t.arena.alloc(owner, raw)
	})
	t.arena.drop(id)
}

// wake tells waiting readers that something changed. Caller holds mu.
func (t *Table) wake() {
	if t.waiting {
		close(t.changed)
		t.changed = make(chan struct{})
		t.waiting = false
	}
}

// Get returns the entry of key. Deleted keys are returned too (Deleted set).
func (t *Table) Get(key []byte) (Entry, bool) {
	h := t.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.find(h, key)
	if i == none {
		return Entry{}, false
	}
	return t.read(t.ent(i)), true
}

// read makes the Entry of e. Caller holds mu.
func (t *Table) read(e *entry) Entry {
	raw := t.arena.bytes(e.slab, e.off, e.size)
	return Entry{
		Key:       raw[e.keyOff : e.keyOff+e.keyLen : e.keyOff+e.keyLen],
		Raw:       raw,
		Stamp:     t.stampOf(e),
		Submitted: e.submitted,
		Revision:  e.rev,
		Deleted:   e.deleted,
	}
}

// Config is the table's configuration, its defaults filled in (the tombstone
// bounds left 0).
func (t *Table) Config() Config { return t.cfg }

// Revision is the latest revision.
func (t *Table) Revision() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rev
}

// Stats returns the gauges and counters.
func (t *Table) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.st
	st.Revision = t.rev
	st.ArenaBytes = t.arena.size
	st.LogSlots = t.log.slots()
	return st
}

// Collect removes the tombstones older than TombstoneTTL and returns how many.
func (t *Table) Collect(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.collect(now)
}

func (t *Table) collect(now time.Time) int {
	horizon := now.Add(-t.cfg.TombstoneTTL).UnixNano()
	n := 0
	for len(t.tombs) > 0 && t.tombs[0].at <= horizon {
		if t.forget(t.popTomb()) {
			n++
		}
	}
	t.st.Collected += uint64(n)
	return n
}

// forget removes the tombstone of tb, popped from the tombs, and reports whether it
// did: false if its entry was written again since (a stale tomb).
func (t *Table) forget(tb tomb) bool {
	if t.ent(tb.ent).rev != tb.rev {
		t.staleTombs--
		return false // written again since: no longer this tombstone
	}
	if t.cfg.Collected != nil {
		t.cfg.Collected(t.keyOf(t.ent(tb.ent)))
	}
	t.remove(tb.ent) // counts it as stale: undone below
	t.staleTombs--
	t.st.Compacted = max(t.st.Compacted, tb.rev)
	return true
}

// The tombs are a binary min-heap by (at, rev), oldest first: a tombstone's age
// counts from its origin, so they do not arrive in order (a late replica, one
// repaired by anti-entropy); rev orders the tombstones of one instant.

// older reports whether a comes before b in the tombs' order.
func (a tomb) older(b tomb) bool { return a.at < b.at || (a.at == b.at && a.rev < b.rev) }

func (t *Table) pushTomb(tb tomb) {
	t.tombs = append(t.tombs, tb)
	for i := len(t.tombs) - 1; i > 0; {
		p := (i - 1) / 2
		if !t.tombs[i].older(t.tombs[p]) {
			break
		}
		t.tombs[p], t.tombs[i] = t.tombs[i], t.tombs[p]
		i = p
	}
}

func (t *Table) popTomb() tomb {
	top := t.tombs[0]
	last := len(t.tombs) - 1
	t.tombs[0] = t.tombs[last]
	t.tombs = t.tombs[:last]
	t.siftDown(0)
	return top
}

func (t *Table) siftDown(i int) {
	for n := len(t.tombs); ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && t.tombs[l].older(t.tombs[m]) {
			m = l
		}
		if r < n && t.tombs[r].older(t.tombs[m]) {
			m = r
		}
		if m == i {
			return
		}
		t.tombs[i], t.tombs[m] = t.tombs[m], t.tombs[i]
		i = m
	}
}

// dropStaleTombs filters the tombs that no longer name their entry, once they
// outnumber the live ones (amortised O(1) per delete), and heapifies the rest.
func (t *Table) dropStaleTombs() {
	if t.staleTombs < 1024 || t.staleTombs < len(t.tombs)/2 {
		return
	}
	k := 0
	for _, tb := range t.tombs {
		if t.ent(tb.ent).rev == tb.rev {
			t.tombs[k] = tb
			k++
		}
	}
	clear(t.tombs[k:])
	t.tombs, t.staleTombs = t.tombs[:k], 0
	for i := k/2 - 1; i >= 0; i-- {
		t.siftDown(i)
	}
}

// String is the key as a string sharing Entry.Key's memory, which is never written.
func (e *Entry) String() string { return unsafe.String(unsafe.SliceData(e.Key), len(e.Key)) }
