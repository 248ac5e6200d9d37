// Command storebench measures an embedded key-value store on the workload of a
// sidecar's --data-dir (issue 10): the latest event of 100,000 task_ids, overwritten at
// random by N concurrent writers that each commit a group of records with a durable
// sync, tombstones collected by deletes, an ordered full scan, and a reopen that loads
// everything back. One process runs one store, so its peak RSS is that store's.
//
//	storebench -store pebble|bbolt|bbolt-batch -dir DIR   # one JSON line on stdout
//	storebench -store fsync -dir DIR                      # this disk's fsync cost
//
// bench/storebench/run.sh runs the stores interleaved and prints the tables of
// docs/BENCHMARKS.md. This is its own module so that the store that loses never enters
// the main go.mod.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// config is the command line.
type config struct {
	store     string
	dir       string
	keys      int
	valueSize int
	writers   []int
	batches   []int
	duration  time.Duration
	delRatio  float64
	collect   float64
	seed      uint64
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(2)
	}
	var out any
	if cfg.store == "fsync" {
		out, err = probeFsync(cfg.dir)
	} else {
		out, err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(1)
	}
}

func parseFlags() (config, error) {
	var c config
	var writers, batches string
	flag.StringVar(&c.store, "store", "", "pebble, bbolt (own group-commit loop around Update), bbolt-batch (db.Batch) or fsync")
	flag.StringVar(&c.dir, "dir", "", "directory for the store; must not exist or be empty")
	flag.IntVar(&c.keys, "keys", 100_000, "distinct task_ids")
	flag.IntVar(&c.valueSize, "value", 200, "bytes of the encoded event in each record")
	flag.StringVar(&writers, "writers", "1,8,64", "concurrent committers, one phase each")
	flag.StringVar(&batches, "batches", "1,100", "records per commit, one phase each")
	flag.DurationVar(&c.duration, "duration", 4*time.Second, "length of each write phase")
	flag.Float64Var(&c.delRatio, "delete-ratio", 0.1, "share of the records of a write phase that delete their key")
	flag.Float64Var(&c.collect, "collect", 0.2, "share of the keys deleted by the collection sweep")
	flag.Uint64Var(&c.seed, "seed", 1, "random seed")
	flag.Parse()
	var err error
	if c.writers, err = ints(writers); err != nil {
		return c, fmt.Errorf("-writers: %w", err)
	}
	if c.batches, err = ints(batches); err != nil {
		return c, fmt.Errorf("-batches: %w", err)
	}
	if c.dir == "" {
		return c, errors.New("-dir is required")
	}
	switch c.store {
	case "pebble", "bbolt", "bbolt-batch", "fsync":
	default:
		return c, fmt.Errorf("-store must be pebble, bbolt, bbolt-batch or fsync, got %q", c.store)
	}
	return c, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// rec is one record to commit: a put, or a delete when val is nil. version is the
// put's version (0 for a delete).
type rec struct {
	key, val []byte
	version  uint64
}

// topVersion is the highest version among recs: what a commit raises the clock's
// high-water mark to, in the same atomic batch, as pkg/store's Commit does.
func topVersion(recs []rec) uint64 {
	var top uint64
	for _, r := range recs {
		top = max(top, r.version)
	}
	return top
}

// kv is the seam between the workload and a store.
type kv interface {
	// commit applies recs atomically and durably: on disk when it returns. It also
	// raises the stored clock high-water mark to topVersion(recs) in the same batch.
	// Concurrent calls may share a sync.
	commit(recs []rec) error
	// scan calls fn on every key in ascending order.
	scan(fn func(k, v []byte)) error
	// syncs counts the durable syncs so far (what a group of commits shares).
	syncs() int64
	close() error
}

func openKV(store, dir string) (kv, error) {
	switch store {
	case "pebble":
		return openPebble(dir)
	case "bbolt":
		return openBolt(dir, false)
	case "bbolt-batch":
		return openBolt(dir, true)
	}
	return nil, fmt.Errorf("unknown store %q", store)
}

// result is one run of one store: a JSON line.
type result struct {
	Store      string       `json:"store"`
	Keys       int          `json:"keys"`
	ValueBytes int          `json:"value_bytes"`
	Go         string       `json:"go"`
	Load       phase        `json:"load"`
	Writes     []phase      `json:"writes"`
	Scan       scanResult   `json:"scan"`
	Collect    phase        `json:"collect"`
	ScanAfter  scanResult   `json:"scan_after_collect"`
	Reopen     reopenResult `json:"reopen"`
	DiskBytes  int64        `json:"disk_bytes"`
	DiskFiles  int          `json:"disk_files"`
	PeakRSS    int64        `json:"peak_rss_bytes"`
	// RSS with the store still open after the scans, split: anonymous memory (the Go
	// heap, pebble's cache and memtables) and file pages mapped (bbolt's mmap of its
	// file, which the kernel can drop and read again).
	RSSAnon   int64         `json:"rss_anon_bytes"`
	RSSFile   int64         `json:"rss_file_bytes"`
	HeapInuse uint64        `json:"heap_inuse_bytes"`
	Elapsed   time.Duration `json:"elapsed_ns"`
}

// phase is a timed stretch of commits.
type phase struct {
	Name       string  `json:"name"`
	Writers    int     `json:"writers"`
	Batch      int     `json:"batch"`
	Records    int64   `json:"records"`
	Commits    int64   `json:"commits"`
	Syncs      int64   `json:"syncs"`
	Seconds    float64 `json:"seconds"`
	RecordsPS  float64 `json:"records_per_sec"`
	CommitsPS  float64 `json:"commits_per_sec"`
	P50us      int64   `json:"p50_us"`
	P99us      int64   `json:"p99_us"`
	P999us     int64   `json:"p999_us"`
	MaxUs      int64   `json:"max_us"`
	PerSync    float64 `json:"commits_per_sync"`
	DeletedPct float64 `json:"deleted_pct"`
}

type scanResult struct {
	Records   int     `json:"records"`
	Seconds   float64 `json:"seconds"` // the median of three passes
	RecordsPS float64 `json:"records_per_sec"`
}

type reopenResult struct {
	OpenSeconds float64 `json:"open_seconds"`
	LoadSeconds float64 `json:"load_seconds"` // the first scan after Open: what a restart pays
	Records     int     `json:"records"`
}

func run(cfg config) (*result, error) {
	start := time.Now()
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, err
	}
	db, err := openKV(cfg.store, cfg.dir)
	if err != nil {
		return nil, err
	}
	w := newWorkload(cfg)
	res := &result{Store: cfg.store, Keys: cfg.keys, ValueBytes: cfg.valueSize, Go: runtime.Version()}
	if res.Load, err = w.load(db); err != nil {
		return nil, err
	}
	for _, writers := range cfg.writers {
		for _, batch := range cfg.batches {
			p, err := w.writes(db, writers, batch)
			if err != nil {
				return nil, err
			}
			res.Writes = append(res.Writes, p)
		}
	}
	if res.Scan, err = scanPasses(db); err != nil {
		return nil, err
	}
	if res.Collect, err = w.collectSweep(db); err != nil {
		return nil, err
	}
	if res.ScanAfter, err = scanPasses(db); err != nil {
		return nil, err
	}
	res.RSSAnon, res.RSSFile = procStatus("RssAnon:"), procStatus("RssFile:")
	if err := db.close(); err != nil {
		return nil, err
	}
	if res.Reopen, err = reopen(cfg); err != nil {
		return nil, err
	}
	res.DiskBytes, res.DiskFiles, err = diskUsage(cfg.dir)
	if err != nil {
		return nil, err
	}
	res.PeakRSS = procStatus("VmHWM:")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInuse = ms.HeapInuse
	res.Elapsed = time.Since(start)
	return res, nil
}

// workload makes the keys and values and keeps the version clock.
type workload struct {
	cfg     config
	keys    [][]byte // in key order
	version atomic.Uint64
}

func newWorkload(cfg config) *workload {
	w := &workload{cfg: cfg, keys: make([][]byte, cfg.keys)}
	for i := range w.keys {
		// pkg/store's record key: the prefix 'k', then the task_id.
		w.keys[i] = fmt.Appendf(nil, "ksvc/instance-%06d", i)
	}
	return w
}

// value encodes a record exactly as pkg/store does (value.go, format 1): format,
// flags, version and submitted time (big-endian), the origin's length (2 bytes) and
// bytes, then the event: the task_id and text filler (protobuf events of this product
// compress a little, not much). It returns the value and its version.
func (w *workload) value(rng *rand.Rand, key []byte) ([]byte, uint64) {
	const origin = "node-a1b2c3"
	version := w.version.Add(1)
	v := make([]byte, 0, 20+len(origin)+w.cfg.valueSize)
	v = append(v, 1, 0)
	v = binary.BigEndian.AppendUint64(v, version)
	v = binary.BigEndian.AppendUint64(v, uint64(time.Now().UnixNano()))
	v = binary.BigEndian.AppendUint16(v, uint16(len(origin)))
	v = append(v, origin...)
	raw := append(v, 0x0a, byte(len(key)-1))
	raw = append(raw, key[1:]...)
	for len(raw) < len(v)+w.cfg.valueSize {
		raw = append(raw, "abcdefghijklmnopqrstuvwxyz0123456789"[rng.IntN(36)])
	}
	return raw, version
}

// load puts every key once: 1 writer, 1,000 records a commit.
func (w *workload) load(db kv) (phase, error) {
	rng := rand.New(rand.NewPCG(w.cfg.seed, 0))
	h := newHist()
	s0, t0 := db.syncs(), time.Now()
	var batch []rec
	for i, k := range w.keys {
		val, version := w.value(rng, k)
		batch = append(batch, rec{key: k, val: val, version: version})
		if len(batch) == 1000 || i == len(w.keys)-1 {
			c0 := time.Now()
			if err := db.commit(batch); err != nil {
				return phase{}, fmt.Errorf("load: %w", err)
			}
			h.RecordValue(time.Since(c0).Microseconds())
			batch = batch[:0]
		}
	}
	return summarize("load", 1, 1000, int64(len(w.keys)), 0, h, time.Since(t0), db.syncs()-s0), nil
}

// writes runs writers goroutines for the phase's duration, each committing batches of
// batch records at random keys, delRatio of them deletes.
func (w *workload) writes(db kv, writers, batch int) (phase, error) {
	hists := make([]*hdrhistogram.Histogram, writers)
	recs, dels := make([]int64, writers), make([]int64, writers)
	errs := make([]error, writers)
	s0, t0 := db.syncs(), time.Now()
	deadline := t0.Add(w.cfg.duration)
	var wg sync.WaitGroup
	for g := range writers {
		hists[g] = newHist()
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.cfg.seed, uint64(writers*1000+batch*10+g)))
			b := make([]rec, batch)
			for time.Now().Before(deadline) {
				for i := range b {
					k := w.keys[rng.IntN(len(w.keys))]
					b[i] = rec{key: k}
					if rng.Float64() >= w.cfg.delRatio {
						b[i].val, b[i].version = w.value(rng, k)
					} else {
						dels[g]++
					}
				}
				c0 := time.Now()
				if err := db.commit(b); err != nil {
					errs[g] = err
					return
				}
				hists[g].RecordValue(time.Since(c0).Microseconds())
				recs[g] += int64(batch)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return phase{}, err
	}
	h := newHist()
	var n, d int64
	for g := range writers {
		h.Merge(hists[g])
		n += recs[g]
		d += dels[g]
	}
	name := fmt.Sprintf("writers=%d batch=%d", writers, batch)
	return summarize(name, writers, batch, n, d, h, elapsed, db.syncs()-s0), nil
}

// collectSweep deletes collect of the keys, evenly spread, in commits of 1,000: a
// sweep that collects expired tombstones.
func (w *workload) collectSweep(db kv) (phase, error) {
	step := int(1 / w.cfg.collect)
	h := newHist()
	s0, t0 := db.syncs(), time.Now()
	var batch []rec
	var n int64
	for i := 0; i < len(w.keys); i += step {
		batch = append(batch, rec{key: w.keys[i]})
		if len(batch) == 1000 || i+step >= len(w.keys) {
			c0 := time.Now()
			if err := db.commit(batch); err != nil {
				return phase{}, fmt.Errorf("collect: %w", err)
			}
			h.RecordValue(time.Since(c0).Microseconds())
			n += int64(len(batch))
			batch = batch[:0]
		}
	}
	return summarize("collect", 1, 1000, n, n, h, time.Since(t0), db.syncs()-s0), nil
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

func summarize(name string, writers, batch int, recs, dels int64, h *hdrhistogram.Histogram, d time.Duration, syncs int64) phase {
	p := phase{
		Name: name, Writers: writers, Batch: batch, Records: recs, Commits: h.TotalCount(),
		Syncs: syncs, Seconds: d.Seconds(),
		RecordsPS: float64(recs) / d.Seconds(), CommitsPS: float64(h.TotalCount()) / d.Seconds(),
		P50us: h.ValueAtQuantile(50), P99us: h.ValueAtQuantile(99), P999us: h.ValueAtQuantile(99.9),
		MaxUs: h.Max(),
	}
	if syncs > 0 {
		p.PerSync = float64(p.Commits) / float64(syncs)
	}
	if recs > 0 {
		p.DeletedPct = 100 * float64(dels) / float64(recs)
	}
	return p
}

// scanPasses scans everything three times, checks the order, and keeps the median.
func scanPasses(db kv) (scanResult, error) {
	var secs []float64
	var n int
	for range 3 {
		var prev []byte
		n = 0
		var bad error
		t0 := time.Now()
		err := db.scan(func(k, v []byte) {
			if prev != nil && bytes.Compare(prev, k) >= 0 && bad == nil {
				bad = fmt.Errorf("scan: %q after %q", k, prev)
			}
			prev = append(prev[:0], k...)
			if len(v) == 0 && bad == nil {
				bad = fmt.Errorf("scan: %q has an empty value", k)
			}
			n++
		})
		secs = append(secs, time.Since(t0).Seconds())
		if err = errors.Join(err, bad); err != nil {
			return scanResult{}, err
		}
	}
	med := median(secs)
	return scanResult{Records: n, Seconds: med, RecordsPS: float64(n) / med}, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// reopen opens the closed store again and reads everything: a restart.
func reopen(cfg config) (reopenResult, error) {
	t0 := time.Now()
	db, err := openKV(cfg.store, cfg.dir)
	if err != nil {
		return reopenResult{}, fmt.Errorf("reopen: %w", err)
	}
	opened := time.Since(t0)
	var r reopenResult
	t1 := time.Now()
	err = db.scan(func(k, v []byte) { r.Records++ })
	r.OpenSeconds, r.LoadSeconds = opened.Seconds(), time.Since(t1).Seconds()
	return r, errors.Join(err, db.close())
}

// diskUsage is du: the blocks allocated to the files under dir.
func diskUsage(dir string) (int64, int, error) {
	var total int64
	var files int
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		files++
		return nil
	})
	return total, files, err
}

// procStatus is a field of /proc/self/status in bytes, e.g. "VmHWM:" (the peak
// resident set); -1 if it cannot be read.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return -1
}
