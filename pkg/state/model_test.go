package state

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// model is the reference: a plain map with the same rules, written for clarity.
type model struct {
	cfg       Config
	m         map[string]modelEntry
	rev       uint64
	compacted uint64
	bytes     int64 // of the live keys
	tombBytes int64 // of the tombstones
	// counters, as Stats
	refused, refusedPeer, collected, collectedEarly uint64
}

type modelEntry struct {
	raw       []byte
	stamp     Stamp
	submitted int64
	rev       uint64
	deleted   bool
	at        time.Time // when applied, for tombstone collection
}

func newModel(cfg Config) *model {
	return &model{cfg: cfg.withDefaults(), m: map[string]modelEntry{}, rev: cfg.FirstRevision, compacted: cfg.FirstRevision}
}

func (m *model) collect(now time.Time) int {
	n := 0
	for k, e := range m.m {
		if e.deleted && !e.at.After(now.Add(-m.cfg.TombstoneTTL)) {
			m.forget(k)
			n++
		}
	}
	m.collected += uint64(n)
	return n
}

func (m *model) forget(k string) {
	e := m.m[k]
	delete(m.m, k)
	m.tombBytes -= int64(len(e.raw))
	m.compacted = max(m.compacted, e.rev)
}

// live counts the keys not deleted; tombs the others.
func (m *model) live() (live, tombs int) {
	for _, e := range m.m {
		if e.deleted {
			tombs++
		} else {
			live++
		}
	}
	return live, tombs
}

// oldestTomb is the key of the oldest tombstone by (at, rev), other than except.
func (m *model) oldestTomb(except string) (string, bool) {
	best, found := "", false
	for k, e := range m.m {
		if !e.deleted || k == except {
			continue
		}
		if b := m.m[best]; !found || e.at.Before(b.at) || (e.at.Equal(b.at) && e.rev < b.rev) {
			best, found = k, true
		}
	}
	return best, found
}

// fitsLive: a live write within the bounds of doc.go, "Bounds".
func (m *model) fitsLive(old modelEntry, ok bool, size int, own bool, live int) bool {
	maxKeys, maxBytes := m.cfg.MaxKeys, m.cfg.MaxBytes
	if !own { // the reserve: OwnReservePercent of each bound
		maxKeys -= m.cfg.MaxKeys * m.cfg.OwnReservePercent / 100
		maxBytes -= m.cfg.MaxBytes * int64(m.cfg.OwnReservePercent) / 100
	}
	wasLive := ok && !old.deleted
	grow := int64(size)
	if wasLive {
		grow -= int64(len(old.raw))
	}
	return (wasLive || live < maxKeys) && (grow <= 0 || m.bytes+grow <= maxBytes)
}

func (m *model) put(key string, raw []byte, s Stamp, sub int64, del, own bool, now time.Time) Result {
	old, ok := m.m[key]
	if ok && !s.Newer(old.stamp) {
		return Result{Outcome: Stale, Current: old.stamp}
	}
	if !ok && del && sub != 0 && sub <= now.Add(-m.cfg.TombstoneTTL).UnixNano() {
		return Result{Outcome: Stale} // an expired deletion of an absent key
	}
	live, _ := m.live()
	if (del && int64(len(raw)) > m.cfg.MaxTombstoneBytes) || (!del && !m.fitsLive(old, ok, len(raw), own, live)) {
		m.refused++
		if !own {
			m.refusedPeer++
		}
		return Result{Outcome: Full}
	}
	// The old state of the key goes.
	if ok && old.deleted {
		m.tombBytes -= int64(len(old.raw))
	} else if ok {
		m.bytes -= int64(len(old.raw))
	}
	delete(m.m, key)
	if del { // the oldest tombstones make room
		horizon := now.Add(-m.cfg.TombstoneTTL)
		for {
			_, tombs := m.live()
			if tombs < m.cfg.MaxTombstones && m.tombBytes+int64(len(raw)) <= m.cfg.MaxTombstoneBytes {
				break
			}
			k, _ := m.oldestTomb(key)
			if m.m[k].at.After(horizon) {
				m.collectedEarly++
			} else {
				m.collected++
			}
			m.forget(k)
		}
		m.tombBytes += int64(len(raw))
	} else {
		m.bytes += int64(len(raw))
	}
	m.rev++
	at := now // a tombstone's age counts from its origin
	if sub != 0 && sub < now.UnixNano() {
		at = time.Unix(0, sub)
	}
	m.m[key] = modelEntry{raw: append([]byte(nil), raw...), stamp: s, submitted: sub, rev: m.rev, deleted: del, at: at}
	return Result{Outcome: Applied, Revision: m.rev, Added: !del && (!ok || old.deleted)}
}

// changes is every entry with a revision above after, in revision order.
func (m *model) changes(after uint64, deletions bool) []modelEntry {
	var out []modelEntry
	for _, e := range m.m {
		if e.rev > after && (deletions || !e.deleted) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rev < out[j].rev })
	return out
}

// event builds raw bytes holding key at an offset, like an encoded Event.
func event(rng *rand.Rand, key string) ([]byte, int) {
	pre := rng.IntN(4)
	raw := make([]byte, pre, pre+len(key)+64)
	raw = append(raw, key...)
	raw = append(raw, bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(64))...)
	return raw, pre
}

// harness drives a table and the model with the same operations and compares them.
type harness struct {
	t     testing.TB
	big   bool // some events are large enough for a slab of their own
	steps uint64
	tab   *Table
	ref   *model
	now   time.Time
	keys  []string
	saved []Scan // resumable cursors, as a reconnecting watcher holds them
}

func newHarness(t testing.TB, cfg Config, nkeys int) *harness {
	tab, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, tab: tab, ref: newModel(cfg), now: time.Unix(1_700_000_000, 0)}
	for i := range nkeys {
		h.keys = append(h.keys, fmt.Sprintf("k%03d", i))
	}
	return h
}

var origins3 = []string{"a", "b", "c"}

func (h *harness) step(op, a, b, c uint8) {
	rng := rand.New(rand.NewPCG(uint64(a), uint64(b)<<8|uint64(c)))
	h.steps++
	switch op % 8 {
	case 0, 1, 2: // put, by the node's own app or from a peer
		w := h.write(op, a, b, c)
		got := h.tab.Put(&w, h.now)
		h.checkPut(&w, got)
	case 3: // a batch of puts, of 1 to 2*PutBatchStep+2 writes (a key may recur)
		n := 1 + int(c)%3*PutBatchStep + int(b)%3
		if len(h.keys) <= 50 || c%4 != 0 {
			n = 1 + int(c)%9 // mostly small: the harness's keys are few
		}
		ws := make([]Write, n)
		for i := range ws {
			ws[i] = h.write(uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)))
		}
		got := h.tab.PutBatch(ws, h.now, make([]Result, 1, 1+n)) // appends
		if len(got) != 1+n {
			h.t.Fatalf("PutBatch of %d writes: %d results", n, len(got)-1)
		}
		for i := range ws { // the model puts them one by one
			h.checkPut(&ws[i], got[1+i])
		}
	case 4: // time passes
		h.now = h.now.Add(time.Duration(a) * time.Second)
	case 5: // collect
		if got, want := h.tab.Collect(h.now), h.ref.collect(h.now); got != want {
			h.t.Fatalf("Collect = %d, model %d", got, want)
		}
	case 6: // read a key
		key := h.keys[int(a)%len(h.keys)]
		got, ok := h.tab.Get([]byte(key))
		want, wok := h.ref.m[key]
		if ok != wok || (ok && !sameEntry(got, want)) {
			h.t.Fatalf("Get(%s) = %v %+v, model %v %+v", key, ok, got, wok, want)
		}
	case 7: // scan from a revision, in small steps
		h.checkScan(a, b, c)
	}
	h.checkStats()
}

// write makes a write of one of the harness's keys from op, a, b and c.
func (h *harness) write(op, a, b, c uint8) Write {
	rng := rand.New(rand.NewPCG(uint64(a)<<8|uint64(op), uint64(b)<<8|uint64(c)))
	own := op&8 != 0
	key := h.keys[int(a)%len(h.keys)]
	raw, off := event(rng, key)
	if h.big && c%7 == 0 {
		raw = append(raw, make([]byte, bigRecord)...)
	}
	// Versions rise slowly with the steps, so keys keep changing, and are out of
	// order within a window of 16.
	s := Stamp{Version: uint64(b%16) + h.steps/32, Origin: origins3[int(c)%3]}
	del := c%5 == 0
	// Submitted: now, a while ago (a late or repaired replica, up to 4 minutes), or
	// unknown (0).
	var sub int64
	if a%4 != 0 {
		sub = h.now.Add(-time.Duration(b) * time.Second).UnixNano()
	}
	return Write{Key: raw[off : off+len(key)], KeyOffset: off, Raw: raw, Stamp: s, Submitted: sub, Deleted: del, Own: own}
}

// checkPut puts w in the model and compares its result with got, the table's.
func (h *harness) checkPut(w *Write, got Result) {
	key := string(w.Key)
	want := h.ref.put(key, bytes.Clone(w.Raw), w.Stamp, w.Submitted, w.Deleted, w.Own, h.now)
	if got != want {
		h.t.Fatalf("Put(%s %+v del=%v own=%v) = %+v, model %+v", key, w.Stamp, w.Deleted, w.Own, got, want)
	}
	w.Raw[w.KeyOffset] ^= 0xff // the table must have copied it
}

func (h *harness) checkScan(a, b, c uint8) {
	deletions := a%2 == 0
	after := h.ref.compacted + uint64(b)%8
	if c%4 == 0 && len(h.saved) > 0 { // resume a saved cursor
		after = h.saved[int(c)%len(h.saved)].After
	}
	s := Scan{After: after, Deletions: deletions, MaxEntries: 1 + int(c)%5, MaxBytes: 40 + int(a)}
	var got []Entry
	for range 100000 {
		page, err := h.tab.Next(&s, nil)
		if deletions && after < h.ref.compacted {
			if !errors.Is(err, ErrCompacted) {
				h.t.Fatalf("Next after %d below compacted %d: err %v", after, h.ref.compacted, err)
			}
			return
		}
		if err != nil {
			h.t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
	}
	if !h.tab.Done(&s) {
		h.t.Fatalf("scan stopped at %d before the end %d", s.After, h.ref.rev)
	}
	want := h.ref.changes(after, deletions)
	if len(got) != len(want) {
		h.t.Fatalf("scan after %d (deletions %v): %d entries, model %d", after, deletions, len(got), len(want))
	}
	for i := range got {
		if !sameEntry(got[i], want[i]) {
			h.t.Fatalf("scan entry %d: %+v, model %+v", i, got[i], want[i])
		}
	}
	if len(h.saved) < 8 {
		h.saved = append(h.saved, s)
	} else {
		h.saved[int(a)%8] = s
	}
}

func sameEntry(g Entry, w modelEntry) bool {
	return bytes.Equal(g.Raw, w.raw) && g.Stamp == w.stamp && g.Submitted == w.submitted &&
		g.Revision == w.rev && g.Deleted == w.deleted && bytes.Contains(g.Raw, g.Key)
}

func (h *harness) checkStats() {
	st := h.tab.Stats()
	m := h.ref
	live, tombs := m.live()
	if st.Keys != live || st.Bytes != m.bytes || st.Tombstones != tombs || st.TombstoneBytes != m.tombBytes ||
		st.Revision != m.rev || st.Compacted != m.compacted || st.Refused != m.refused || st.RefusedPeer != m.refusedPeer ||
		st.Collected != m.collected || st.CollectedEarly != m.collectedEarly {
		h.t.Fatalf("stats %+v; model keys %d bytes %d tombstones %d (%d bytes) rev %d compacted %d refused %d (peer %d) collected %d (early %d)",
			st, live, m.bytes, tombs, m.tombBytes, m.rev, m.compacted, m.refused, m.refusedPeer, m.collected, m.collectedEarly)
	}
	// The bounds hold (a peer's write stays within the smaller ones, so these are
	// the bounds of all).
	if st.Keys > m.cfg.MaxKeys || st.Bytes > m.cfg.MaxBytes || st.Tombstones > m.cfg.MaxTombstones || st.TombstoneBytes > m.cfg.MaxTombstoneBytes {
		h.t.Fatalf("stats %+v past the bounds %+v", st, m.cfg)
	}
	// The log and the arena stay proportional to what is live.
	if limit := 2*(st.Keys+st.Tombstones) + 2*chunkSlots; st.LogSlots > limit {
		h.t.Fatalf("log holds %d slots for %d keys and tombstones (limit %d)", st.LogSlots, st.Keys+st.Tombstones, limit)
	}
	if len(h.keys) <= 50 || h.steps%32 == 0 { // it walks every entry
		h.checkArena()
	}
	if h.steps%128 == 0 { // it builds a tree of 69,905 hashes
		h.checkDigest()
	}
}

// checkArena: every slab's live count is the sum of its live records.
func (h *harness) checkArena() {
	tab := h.tab
	tab.mu.Lock()
	defer tab.mu.Unlock()
	live := make([]int, len(tab.arena.slabs))
	for i := uint32(0); i < tab.nents; i++ {
		if e := tab.ent(i); e.rev != 0 {
			live[e.slab] += headerSize + int(e.size)
		}
	}
	var used, all, usedOthers, liveOthers int64
	for id, s := range tab.arena.slabs {
		if s.live != live[id] {
			h.t.Fatalf("slab %d counts %d live bytes, entries hold %d", id, s.live, live[id])
		}
		if s.b == nil && live[id] != 0 {
			h.t.Fatalf("dropped slab %d still holds %d live bytes", id, live[id])
		}
		used, all = used+int64(len(s.b)), all+int64(s.live)
		if uint32(id) != tab.arena.cur {
			usedOthers, liveOthers = usedOthers+int64(len(s.b)), liveOthers+int64(s.live)
		}
	}
	if tab.arena.used != used || tab.arena.live != all {
		h.t.Fatalf("arena counts %d bytes used, %d live; its slabs hold %d, %d", tab.arena.used, tab.arena.live, used, all)
	}
	// The slabs other than the current one stay within 1.5 times their live bytes,
	// and a slab that a compaction may be due to take next.
	if dead := usedOthers - liveOthers; 2*dead > liveOthers+2*slabSize {
		h.t.Fatalf("arena slabs other than the current one: %d bytes dead for %d live", dead, liveOthers)
	}
}

func TestTableAgainstModel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		keys    int
		steps   int
		seed    uint64
		collide bool // every key hashes to one of three values
		big     bool
	}{
		{"roomy", Config{MaxKeys: 1000, MaxBytes: 1 << 20, TombstoneTTL: 30 * time.Second, FirstRevision: 100}, 40, 20000, 1, false, false},
		{"key bound", Config{MaxKeys: 7, MaxBytes: 1 << 20, TombstoneTTL: 10 * time.Second}, 20, 20000, 2, false, false},
		{"byte bound", Config{MaxKeys: 1000, MaxBytes: 300, TombstoneTTL: 10 * time.Second}, 30, 20000, 3, false, false},
		{"one hot key", Config{MaxKeys: 10, MaxBytes: 1 << 20, TombstoneTTL: time.Hour}, 1, 20000, 4, false, false},
		{"deletes kept long", Config{MaxKeys: 10, MaxBytes: 1 << 20, TombstoneTTL: 10000 * time.Hour}, 2, 150000, 6, false, false},
		{"many keys", Config{MaxKeys: 5000, MaxBytes: 1 << 30, TombstoneTTL: time.Minute}, 250, 40000, 5, false, false},
		{"hashes collide", Config{MaxKeys: 30, MaxBytes: 1 << 20, TombstoneTTL: time.Minute}, 40, 20000, 7, true, false},
		{"big events", Config{MaxKeys: 100, MaxBytes: 4 * bigRecord, TombstoneTTL: time.Minute}, 30, 5000, 8, false, true},
		{"tombstone bound", Config{MaxKeys: 1000, MaxBytes: 1 << 20, MaxTombstones: 3, TombstoneTTL: time.Hour}, 30, 20000, 9, false, false},
		{"tombstone byte bound", Config{MaxKeys: 1000, MaxBytes: 1 << 20, MaxTombstoneBytes: 150, TombstoneTTL: time.Hour}, 30, 20000, 10, false, false},
		{"own reserve", Config{MaxKeys: 10, MaxBytes: 600, OwnReservePercent: 30, TombstoneTTL: time.Minute}, 30, 20000, 11, false, false},
		{"every bound", Config{MaxKeys: 8, MaxBytes: 400, MaxTombstones: 4, MaxTombstoneBytes: 200, OwnReservePercent: 25,
			TombstoneTTL: 20 * time.Second}, 20, 40000, 12, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg, tc.keys)
			h.big = tc.big
			if tc.collide {
				h.tab.hash = func(b []byte) uint64 { return uint64(b[len(b)-1] % 3) }
			}
			rng := rand.New(rand.NewPCG(tc.seed, 7))
			for range tc.steps {
				h.step(uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)))
			}
			st := h.tab.Stats()
			t.Logf("keys %d, tombstones %d; refused %d (of peers %d), collected %d, early %d",
				st.Keys, st.Tombstones, st.Refused, st.RefusedPeer, st.Collected, st.CollectedEarly)
		})
	}
}

// TestCompactionKeepsRevisionOrder writes many keys once, then rewrites a few hot keys
// for a long time, so chunks and slabs are compacted and merged over and over; a full
// scan must still see every key once, in revision order.
func TestCompactionKeepsRevisionOrder(t *testing.T) {
	h := newHarness(t, Config{MaxKeys: 10000, MaxBytes: 1 << 30, TombstoneTTL: time.Hour}, 3000)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range 3000 {
		h.step(0, uint8(i), uint8(i>>8)|1, uint8(rng.IntN(255))|1)
	}
	put := func(key string, v uint64) {
		raw, off := event(rng, key)
		w := &Write{Key: raw[off : off+len(key)], KeyOffset: off, Raw: raw, Stamp: Stamp{Version: v, Origin: "a"}}
		if got, want := h.tab.Put(w, h.now), h.ref.put(key, raw, w.Stamp, 0, false, false, h.now); got != want {
			t.Fatalf("Put %s: %+v, model %+v", key, got, want)
		}
	}
	for i := range 120000 {
		put(h.keys[rng.IntN(300)], uint64(100+i))
	}
	h.checkScan(1, 0, 1)
	h.checkStats()
	h.checkArena()
	st := h.tab.Stats()
	t.Logf("keys %d, log slots %d, arena %d bytes for %d event bytes", st.Keys, st.LogSlots, st.ArenaBytes, st.Bytes)
}

// TestPutBatchEqualsPuts writes the same writes to two tables, one by one (Put,
// checked against the model) and in batches of 1 to 3*PutBatchStep (PutBatch), at
// every bound and with keys recurring within a batch: the results, the stats, the
// digest and every entry (revisions included) must be the same.
func TestPutBatchEqualsPuts(t *testing.T) {
	for _, cfg := range []Config{
		{MaxKeys: 1000, MaxBytes: 1 << 20, TombstoneTTL: 30 * time.Second},
		{MaxKeys: 8, MaxBytes: 400, MaxTombstones: 4, MaxTombstoneBytes: 200, OwnReservePercent: 25, TombstoneTTL: 20 * time.Second},
		{MaxKeys: 100, MaxBytes: 2000, MaxTombstones: 5, TombstoneTTL: time.Hour},
	} {
		h := newHarness(t, cfg, 40)
		batched, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(cfg.MaxKeys), 11))
		for round := range 300 {
			ws := make([]Write, 1+rng.IntN(3*PutBatchStep))
			for i := range ws {
				h.steps++
				ws[i] = h.write(uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)))
			}
			copies := make([]Write, len(ws))
			for i, w := range ws {
				copies[i] = w
				copies[i].Raw = bytes.Clone(w.Raw)
				copies[i].Key = copies[i].Raw[w.KeyOffset : w.KeyOffset+len(w.Key)]
			}
			got := batched.PutBatch(copies, h.now, nil)
			for i := range ws {
				want := h.tab.Put(&ws[i], h.now)
				h.checkPut(&ws[i], want)
				if got[i] != want {
					t.Fatalf("round %d write %d of %d: PutBatch %+v, Put %+v", round, i, len(ws), got[i], want)
				}
			}
			h.checkStats()
			if a, b := h.tab.Stats(), batched.Stats(); a != b {
				t.Fatalf("round %d: stats by Put %+v, by PutBatch %+v", round, a, b)
			}
			if a, b := h.tab.DigestRoot(), batched.DigestRoot(); a != b {
				t.Fatalf("round %d: digest by Put %x, by PutBatch %x", round, a, b)
			}
			if round%3 == 0 {
				h.now = h.now.Add(time.Duration(rng.IntN(20)) * time.Second)
			}
		}
		a, b := scanAll(t, h.tab), scanAll(t, batched)
		if len(a) != len(b) {
			t.Fatalf("%d entries by Put, %d by PutBatch", len(a), len(b))
		}
		for i := range a {
			if !bytes.Equal(a[i].Raw, b[i].Raw) || a[i].Stamp != b[i].Stamp || a[i].Revision != b[i].Revision ||
				a[i].Deleted != b[i].Deleted || a[i].Submitted != b[i].Submitted {
				t.Fatalf("entry %d by Put %+v, by PutBatch %+v", i, a[i], b[i])
			}
		}
		st := batched.Stats()
		t.Logf("keys %d, tombstones %d, refused %d, collected early %d, stale %d", st.Keys, st.Tombstones, st.Refused, st.CollectedEarly, st.StaleSeen)
	}
}

// scanAll reads every entry, deletions included, in revision order.
func scanAll(t *testing.T, tab *Table) []Entry {
	s := Scan{After: tab.Stats().Compacted, Deletions: true, MaxEntries: 100, MaxBytes: 1 << 20}
	var out []Entry
	for !tab.Done(&s) {
		page, err := tab.Next(&s, nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
	}
	return out
}

// TestArenaStaysProportional writes 5,000 keys of ~450 bytes (a few slabs), then
// rewrites every other one at random, so every slab keeps cold records live among
// the dead: the compactions must keep the arena within its bound (checkArena) and
// every key's latest bytes intact.
func TestArenaStaysProportional(t *testing.T) {
	tab, err := New(Config{MaxKeys: 5000, MaxBytes: 1 << 30, TombstoneTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, tab: tab}
	rng := rand.New(rand.NewPCG(3, 4))
	latest := map[string][]byte{}
	put := func(key string, v uint64) {
		raw, off := event(rng, key)
		raw = append(raw, make([]byte, 400)...)
		w := &Write{Key: raw[off : off+len(key)], KeyOffset: off, Raw: raw, Stamp: Stamp{Version: v, Origin: "a"}}
		if r := tab.Put(w, time.Unix(1_700_000_000, 0)); r.Outcome != Applied {
			t.Fatalf("Put %s: %+v", key, r)
		}
		latest[key] = raw
	}
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%04d", i)
		put(keys[i], 1)
	}
	for i := range 100000 {
		put(keys[2*rng.IntN(len(keys)/2)], uint64(2+i))
		if i%1000 == 0 {
			h.checkArena()
		}
	}
	h.checkArena()
	for k, raw := range latest {
		if e, ok := tab.Get([]byte(k)); !ok || !bytes.Equal(e.Raw, raw) {
			t.Fatalf("Get(%s) = %v %q, want %q", k, ok, e.Raw, raw)
		}
	}
	st := tab.Stats()
	t.Logf("keys %d, arena %d bytes for %d event bytes", st.Keys, st.ArenaBytes, st.Bytes)
}

func TestChangedWakesReaders(t *testing.T) {
	tab, err := New(Config{MaxKeys: 10, MaxBytes: 1000, TombstoneTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ch := tab.Changed(0)
	select {
	case <-ch:
		t.Fatal("closed before any change")
	default:
	}
	tab.Put(&Write{Key: []byte("k"), Raw: []byte("k"), Stamp: Stamp{Version: 1, Origin: "a"}}, time.Now())
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("a change did not close the channel")
	}
	select {
	case <-tab.Changed(0):
	default:
		t.Fatal("Changed(0) with revision 1 is not closed at once")
	}
}

func TestCheckResume(t *testing.T) {
	tab, err := New(Config{MaxKeys: 10, MaxBytes: 1000, TombstoneTTL: time.Second, FirstRevision: 50})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	tab.Put(&Write{Key: []byte("k"), Raw: []byte("k"), Stamp: Stamp{Version: 1, Origin: "a"}}, now)                // 51
	tab.Put(&Write{Key: []byte("k"), Raw: []byte("k"), Stamp: Stamp{Version: 2, Origin: "a"}, Deleted: true}, now) // 52
	tab.Put(&Write{Key: []byte("j"), Raw: []byte("j"), Stamp: Stamp{Version: 1, Origin: "a"}}, now)                // 53
	for _, tc := range []struct {
		rev uint64
		ok  bool
	}{{49, false}, {50, true}, {53, true}, {54, false}} {
		if err := tab.CheckResume(tc.rev); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrCompacted)) {
			t.Errorf("CheckResume(%d) = %v, want ok=%v", tc.rev, err, tc.ok)
		}
	}
	if n := tab.Collect(now.Add(time.Second)); n != 1 {
		t.Fatalf("collected %d tombstones, want 1", n)
	}
	if err := tab.CheckResume(51); err == nil {
		t.Error("a resume from before a collected tombstone was accepted")
	}
	if err := tab.CheckResume(52); err != nil {
		t.Errorf("a resume from the collected tombstone's revision: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := New(Config{})
	if err == nil {
		t.Fatal("a zero config was accepted")
	}
	for _, want := range []string{"MaxKeys", "MaxBytes", "TombstoneTTL"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// FuzzTable drives the table and the model with operations read from the input.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 7, 1, 0, 0, 0, 2, 9, 5, 5, 0, 0, 0, 7, 0, 0, 4})
	f.Add(bytes.Repeat([]byte{0, 3, 1, 5, 4, 200, 0, 0, 5, 0, 0, 0, 7, 2, 3, 4}, 20))
	f.Fuzz(func(t *testing.T, ops []byte) {
		cfg := Config{MaxKeys: 1 + int(len(ops)%9), MaxBytes: 200 + int64(len(ops)%7)*40, TombstoneTTL: 20 * time.Second,
			MaxTombstones: len(ops) % 5, MaxTombstoneBytes: int64(len(ops)%3) * 80, OwnReservePercent: len(ops) % 4 * 20}
		h := newHarness(t, cfg, 12)
		for len(ops) >= 4 {
			h.step(ops[0], ops[1], ops[2], ops[3])
			ops = ops[4:]
		}
	})
}

// TestCollectedAndPastCompaction: Config.Collected hears the key of every tombstone
// the table forgets, by Collect and by a delete at MaxTombstones (the oldest first,
// before their TTL); a delete makes room for a new key at once; a scan with
// PastCompaction reads on from below the compacted revision where a plain one is
// refused.
func TestCollectedAndPastCompaction(t *testing.T) {
	var forgotten []string
	tab, err := New(Config{MaxKeys: 3, MaxBytes: 1000, MaxTombstones: 2, TombstoneTTL: time.Second, FirstRevision: 50,
		Collected: func(k []byte) { forgotten = append(forgotten, string(k)) }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	v := uint64(0)
	put := func(k string, del bool) Result {
		v++
		return tab.Put(&Write{Key: []byte(k), Raw: []byte(k), Stamp: Stamp{Version: v, Origin: "a"}, Deleted: del}, now)
	}
	put("a", true)  // 51
	put("b", true)  // 52
	put("c", false) // 53
	now = now.Add(2 * time.Second)
	if n := tab.Collect(now); n != 2 || !slices.Equal(forgotten, []string{"a", "b"}) {
		t.Fatalf("Collect: %d, heard %q; want a and b", n, forgotten)
	}
	put("d", false) // 54
	put("e", false) // 55
	if r := put("f", false); r.Outcome != Full {
		t.Fatalf("a fourth key in a table of 3: %+v", r)
	}
	forgotten = nil
	now = now.Add(time.Millisecond)
	put("d", true) // 56: deleting a key makes room at once
	if r := put("f", false); r.Outcome != Applied || !r.Added {
		t.Fatalf("a new key after a delete: %+v", r)
	}
	now = now.Add(time.Millisecond)
	put("e", true) // 58
	put("c", true) // 59: a third tombstone; d's, the oldest, goes before its TTL
	if st := tab.Stats(); !slices.Equal(forgotten, []string{"d"}) || st.CollectedEarly != 1 || st.Tombstones != 2 || st.Keys != 1 {
		t.Fatalf("a third tombstone at MaxTombstones 2: heard %q, stats %+v; want d forgotten early, 2 tombstones, 1 key", forgotten, st)
	}
	if _, err := tab.Next(&Scan{After: 50, Deletions: true}, nil); !errors.Is(err, ErrCompacted) {
		t.Fatalf("a plain scan below the compacted revision: %v, want ErrCompacted", err)
	}
	got, err := tab.Next(&Scan{After: 50, Deletions: true, PastCompaction: true, MaxEntries: 10, MaxBytes: 100}, nil)
	if err != nil || len(got) != 3 || string(got[0].Key) != "f" || string(got[1].Key) != "e" || string(got[2].Key) != "c" {
		t.Fatalf("PastCompaction scan: %d entries, %v; want f, e and c", len(got), err)
	}
}

// TestOwnReserve: writes from peers stop adding keys, and bytes, at the bounds less
// OwnReservePercent; the node's own writes go on to the bounds; a peer's update of
// a key the table holds still goes through.
func TestOwnReserve(t *testing.T) {
	tab, err := New(Config{MaxKeys: 10, MaxBytes: 1000, OwnReservePercent: 20, TombstoneTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	put := func(k string, v uint64, size int, own bool) Outcome {
		raw := append([]byte(k), make([]byte, size-len(k))...)
		return tab.Put(&Write{Key: raw[:len(k)], Raw: raw, Stamp: Stamp{Version: v, Origin: "p"}, Own: own}, now).Outcome
	}
	for i := range 8 {
		if o := put(fmt.Sprintf("p%d", i), 1, 10, false); o != Applied {
			t.Fatalf("peer key %d of 8: %v", i, o)
		}
	}
	if o := put("p8", 1, 10, false); o != Full {
		t.Fatalf("a ninth peer key, past 80 %% of 10: %v, want Full", o)
	}
	if o := put("p0", 2, 730, false); o != Applied {
		t.Fatalf("a peer's update of a key held, to 800 bytes: %v", o)
	}
	if o := put("p1", 2, 11, false); o != Full {
		t.Fatalf("a peer's update past 800 bytes: %v, want Full", o)
	}
	for _, k := range []string{"o1", "o2"} {
		if o := put(k, 1, 10, true); o != Applied {
			t.Fatalf("own key %s in the reserve: %v", k, o)
		}
	}
	if o := put("o3", 1, 10, true); o != Full {
		t.Fatalf("an eleventh key: %v, want Full", o)
	}
	if st := tab.Stats(); st.Keys != 10 || st.Refused != 3 || st.RefusedPeer != 2 {
		t.Fatalf("stats %+v: want 10 keys, 3 refused, 2 of them peers'", st)
	}
}
