package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open opens a store in dir and closes it when the test ends (a second Close is a
// no-op, so tests may close it themselves).
func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return open(t, s.dir)
}

// load returns every record, copied, in Load's order.
func load(t *testing.T, s *Store) []Record {
	t.Helper()
	var out []Record
	err := s.Load(func(r Record) error {
		r.Key = bytes.Clone(r.Key)
		r.Raw = bytes.Clone(r.Raw)
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rec(key string, version uint64) Record {
	return Record{Key: []byte(key), Raw: []byte("event:" + key), Version: version,
		Origin: "node-a", Submitted: int64(version) * 1000}
}

func commit(t *testing.T, s *Store, puts []Record, deletes ...string) {
	t.Helper()
	var dels [][]byte
	for _, d := range deletes {
		dels = append(dels, []byte(d))
	}
	if err := s.Commit(puts, dels); err != nil {
		t.Fatal(err)
	}
}

func equal(a, b []Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Raw, y.Raw) || x.Version != y.Version ||
			x.Origin != y.Origin || x.Submitted != y.Submitted || x.Deleted != y.Deleted {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	s := open(t, t.TempDir())
	if got := load(t, s); len(got) != 0 {
		t.Fatalf("a new store holds %d records", len(got))
	}
	tomb := rec("b/tomb", 4)
	tomb.Deleted, tomb.Raw = true, nil
	commit(t, s, []Record{rec("c", 1), rec("a", 2), rec("b", 3), tomb})
	commit(t, s, []Record{rec("a", 7)}, "b")         // overwrite a, delete b
	commit(t, s, []Record{rec("d", 8)}, "d", "none") // put and delete: removed; deleting nothing is fine
	commit(t, s, nil)                                // nothing: no error
	want := []Record{rec("a", 7), tomb, rec("c", 1)} // bytewise key order
	want[1].Raw = []byte{}
	if got := load(t, s); !equal(got, want) {
		t.Fatalf("before reopen:\n got %+v\nwant %+v", got, want)
	}
	s = reopen(t, s)
	if got := load(t, s); !equal(got, want) {
		t.Fatalf("after reopen:\n got %+v\nwant %+v", got, want)
	}
	if st := s.Stats(); st.DiskBytes == 0 {
		t.Errorf("Stats after reopen: %+v, want DiskBytes > 0", st)
	}
}

func TestLoadStopsAtFnError(t *testing.T) {
	s := open(t, t.TempDir())
	commit(t, s, []Record{rec("a", 1), rec("b", 2), rec("c", 3)})
	stop := errors.New("enough")
	var seen []string
	err := s.Load(func(r Record) error {
		seen = append(seen, string(r.Key))
		if len(seen) == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || strings.Join(seen, ",") != "a,b" {
		t.Fatalf("Load: err %v after %v, want %v after a,b", err, seen, stop)
	}
}

func TestClock(t *testing.T) {
	s := open(t, t.TempDir())
	steps := []struct {
		name     string
		versions []uint64
		want     uint64
	}{
		{"a new store", nil, 0},
		{"raised to the highest put", []uint64{5, 9, 3}, 9},
		{"a lower commit does not lower it", []uint64{2}, 9},
		{"an equal one neither", []uint64{9}, 9},
		{"raised again", []uint64{12}, 12},
	}
	// Steps of one store, so not subtests: a subtest's cleanup would close it.
	for i, st := range steps {
		var puts []Record
		for j, v := range st.versions {
			puts = append(puts, rec(fmt.Sprintf("k%d-%d", i, j), v))
		}
		commit(t, s, puts)
		if got := s.Clock(); got != st.want {
			t.Fatalf("%s: Clock() = %d, want %d", st.name, got, st.want)
		}
		s = reopen(t, s)
		if got := s.Clock(); got != st.want {
			t.Fatalf("%s: after reopen, Clock() = %d, want %d", st.name, got, st.want)
		}
	}
	commit(t, s, nil, "k1-1")
	s = reopen(t, s)
	if got := s.Clock(); got != 12 {
		t.Fatalf("deletes: after reopen, Clock() = %d, want 12", got)
	}
}

// TestClockConcurrent: commits of interleaved versions landing in any order leave
// the maximum on disk, the merge operator's job.
func TestClockConcurrent(t *testing.T) {
	s := open(t, t.TempDir())
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				v := uint64(i*8 + g + 1) // 1..200 across the goroutines
				if err := s.Commit([]Record{rec(fmt.Sprintf("g%d", g), v)}, nil); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	if got := s.Clock(); got != 200 {
		t.Fatalf("after reopen, Clock() = %d, want 200", got)
	}
}

func TestNodeID(t *testing.T) {
	s := open(t, t.TempDir())
	if got := s.NodeID(); got != "" {
		t.Fatalf("a new store's NodeID() = %q, want empty", got)
	}
	if err := s.SetNodeID("node-a"); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s)
	if got := s.NodeID(); got != "node-a" {
		t.Fatalf("after reopen, NodeID() = %q, want node-a", got)
	}
	for _, bad := range []string{"", strings.Repeat("n", MaxOriginBytes+1)} {
		if err := s.SetNodeID(bad); err == nil || !strings.Contains(err.Error(), "node id") {
			t.Errorf("SetNodeID(%d bytes) = %v, want an error naming the node id", len(bad), err)
		}
	}
	if got := s.NodeID(); got != "node-a" {
		t.Fatalf("after refused SetNodeIDs, NodeID() = %q, want node-a", got)
	}
}

func TestOpenLocksTheDir(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]string{"the same path": dir, "a symlink to it": link} {
		t.Run(name, func(t *testing.T) {
			s2, err := Open(d, DefaultConfig())
			if err == nil {
				s2.Close()
				t.Fatal("a second Open of an open data dir succeeded")
			}
			for _, want := range []string{dir, "in use", "--data-dir"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, dir) // released by Close
}

func TestClosed(t *testing.T) {
	s := open(t, t.TempDir())
	commit(t, s, []Record{rec("a", 1)})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close = %v, want nil", err)
	}
	calls := map[string]error{
		"Commit":    s.Commit([]Record{rec("b", 2)}, nil),
		"Load":      s.Load(func(Record) error { return nil }),
		"SetNodeID": s.SetNodeID("x"),
	}
	for name, err := range calls {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if st := s.Stats(); st.Commits != 1 || st.Records != 1 {
		t.Errorf("Stats after Close = %+v, want the counters kept", st)
	}
}

func TestValidate(t *testing.T) {
	long := func(n int) []byte { return bytes.Repeat([]byte("x"), n) }
	ok := rec("ok", 1)
	cases := []struct {
		name    string
		puts    []Record
		deletes [][]byte
		want    string // in the error; "" for none
	}{
		{"longest key", []Record{{Key: long(MaxKeyBytes), Origin: string(long(MaxOriginBytes))}}, nil, ""},
		{"empty key", []Record{ok, {Version: 1}}, nil, "puts[1].Key: 0 bytes"},
		{"key too long", []Record{{Key: long(MaxKeyBytes + 1)}}, nil, "puts[0].Key: 1025 bytes"},
		{"origin too long", []Record{{Key: []byte("k"), Origin: string(long(MaxOriginBytes + 1))}}, nil, "puts[0].Origin: 1025 bytes"},
		{"empty delete", []Record{ok}, [][]byte{[]byte("a"), nil}, "deletes[1]: 0 bytes"},
		{"delete too long", nil, [][]byte{long(MaxKeyBytes + 1)}, "deletes[0]: 1025 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := open(t, t.TempDir())
			err := s.Commit(c.puts, c.deletes)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Commit = %v, want an error with %q", err, c.want)
			}
			if got := load(t, s); len(got) != 0 {
				t.Fatalf("a refused Commit wrote %d records", len(got))
			}
		})
	}
	t.Run("raw too long", func(t *testing.T) {
		// checkLens alone: a 1 GiB record is not worth allocating in a test.
		err := checkLens(1, 0, MaxRawBytes+1)
		if err == nil || !strings.Contains(err.Error(), "Raw: 1073741825 bytes") {
			t.Fatalf("checkLens = %v, want Raw named", err)
		}
		if err := checkLens(MaxKeyBytes, MaxOriginBytes, MaxRawBytes); err != nil {
			t.Fatalf("checkLens at every bound = %v", err)
		}
	})
}

// TestCorruptValue: a value that does not decode makes Load fail with an error that
// names the key, not panic.
func TestCorruptValue(t *testing.T) {
	cases := map[string][]byte{
		"empty":          {},
		"short":          {formatV1, 0, 1},
		"unknown format": append([]byte{9}, make([]byte, valueHeader)...),
		"unknown flags":  append([]byte{formatV1, 0x80}, make([]byte, valueHeader)...),
		"origin past the end": func() []byte {
			v := appendValue(nil, &Record{Key: []byte("k"), Origin: "abc"})
			return v[:valueHeader+1]
		}(),
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			s := open(t, t.TempDir())
			commit(t, s, []Record{rec("a", 1), rec("c", 2)})
			if err := s.db.Set([]byte("kb/broken"), bad, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			s = reopen(t, s)
			var seen int
			err := s.Load(func(Record) error { seen++; return nil })
			if err == nil || !strings.Contains(err.Error(), `"b/broken"`) || !errors.Is(err, errValue) {
				t.Fatalf("Load = %v, want an errValue naming b/broken", err)
			}
			if seen != 1 {
				t.Fatalf("Load called fn %d times before the bad value, want 1", seen)
			}
		})
	}
}

func TestNewerLayoutRefused(t *testing.T) {
	for name, v := range map[string][]byte{"layout 2": {2}, "two bytes": {1, 0}} {
		t.Run(name, func(t *testing.T) {
			s := open(t, t.TempDir())
			if err := s.db.Set([]byte(metaLayout), v, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(s.dir, DefaultConfig())
			if err == nil {
				s2.Close()
				t.Fatal("Open of a store of another layout succeeded")
			}
			for _, want := range []string{s.dir, "layout", "this build reads only layout 1"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			open(t, t.TempDir()) // the refused Open released its lock: nothing leaks
			s3, err := Open(s.dir, DefaultConfig())
			if err == nil || strings.Contains(err.Error(), "in use") {
				t.Errorf("a second Open = %v, want the layout error again, not a held lock", err)
			}
			if s3 != nil {
				s3.Close()
			}
		})
	}
}

// slowSyncFS makes every sync of pebble's log take at least delay, as a slow disk
// would, so that concurrent commits pile up behind one sync whatever the test
// machine's disk (a tmpfs syncs in no time).
type slowSyncFS struct {
	vfs.FS
	delay time.Duration
}

func (f slowSyncFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return file, err
	}
	return slowSyncFile{File: file, delay: f.delay}, nil
}

func (f slowSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap(name, file, err)
}

func (f slowSyncFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(old, name, c)
	return f.wrap(name, file, err)
}

type slowSyncFile struct {
	vfs.File
	delay time.Duration
}

func (f slowSyncFile) Sync() error     { time.Sleep(f.delay); return f.File.Sync() }
func (f slowSyncFile) SyncData() error { time.Sleep(f.delay); return f.File.SyncData() }

// TestGroupCommit: 8 goroutines committing at once all land, and share syncs.
func TestGroupCommit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.fs = slowSyncFS{FS: vfs.Default, delay: time.Millisecond}
	s, err := Open(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const writers, each = 8, 40
	before := s.Stats()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				r := rec(fmt.Sprintf("w%d/%03d", g, i), uint64(g*each+i+1))
				if err := s.Commit([]Record{r}, nil); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	commits, syncs := st.Commits-before.Commits, st.Syncs-before.Syncs
	t.Logf("%d commits, %d syncs of the log, last commit %s", commits, syncs, st.LastCommit)
	if commits != writers*each || st.Records != writers*each {
		t.Fatalf("Stats = %+v, want %d commits and records", st, writers*each)
	}
	if syncs == 0 || syncs >= commits {
		t.Fatalf("%d syncs for %d concurrent commits: want some, and fewer (group commit)", syncs, commits)
	}
	if got := load(t, s); len(got) != writers*each {
		t.Fatalf("Load: %d records, want %d", len(got), writers*each)
	}
	if got := s.Clock(); got != writers*each {
		t.Fatalf("Clock() = %d, want %d", got, writers*each)
	}
}

// TestOpenRefusesForeignDir: a directory that holds files but no data dir's lock file
// is refused, naming a file; an empty one, or one with only lost+found, is taken.
func TestOpenRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir, DefaultConfig()); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open of a directory with someone's files: %v; want it refused, naming a file", err)
	}
	vol := t.TempDir()
	if err := os.Mkdir(filepath.Join(vol, "lost+found"), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Open(vol, DefaultConfig())
	if err != nil {
		t.Fatalf("Open of a fresh volume (only lost+found): %v", err)
	}
	s.Close()
	if s, err = Open(vol, DefaultConfig()); err != nil { // and again: now a data dir
		t.Fatalf("reopen: %v", err)
	}
	s.Close()
}

// TestRaiseClock: RaiseClock raises the high-water mark durably and never lowers it.
func TestRaiseClock(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint64{100, 50} {
		if err := s.RaiseClock(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Clock(); got != 100 {
		t.Fatalf("Clock = %d, want 100 (raised to 100, never lowered to 50)", got)
	}
	s.Close()
	if s, err = Open(dir, DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Clock(); got != 100 {
		t.Fatalf("Clock after reopen = %d, want 100", got)
	}
}

// TestTransportPosition: a saved position reads back, across a reopen (the next
// save is synced), the last save wins, and one
// over the bound is refused and changes nothing.
func TestTransportPosition(t *testing.T) {
	s := open(t, t.TempDir())
	if v, err := s.TransportPosition(); err != nil || v != nil {
		t.Fatalf("a new store's TransportPosition() = %q, %v; want nil, nil", v, err)
	}
	for _, v := range []string{"first", "second"} {
		if err := s.SetTransportPosition([]byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	s = reopen(t, s)
	if v, err := s.TransportPosition(); err != nil || string(v) != "second" {
		t.Fatalf("after reopen, TransportPosition() = %q, %v; want \"second\"", v, err)
	}
	if err := s.SetTransportPosition(make([]byte, MaxTransportPositionBytes+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("SetTransportPosition(over the bound) = %v, want an error saying the bound", err)
	}
	if v, _ := s.TransportPosition(); string(v) != "second" {
		t.Fatalf("after a refused save, TransportPosition() = %q, want \"second\"", v)
	}
}
