package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// fakeDisk is a file system whose free space the test sets, and whose log writes
// fail with failErr while it is set.
type fakeDisk struct {
	free    atomic.Uint64
	failErr atomic.Pointer[error]
}

func newFakeDisk(free uint64) *fakeDisk {
	d := &fakeDisk{}
	d.free.Store(free)
	return d
}

func (d *fakeDisk) statfs(string) (uint64, error) { return d.free.Load(), nil }

func (d *fakeDisk) config() Config {
	cfg := DefaultConfig()
	cfg.MinFreeBytes = 1 << 20
	cfg.statfs = d.statfs
	cfg.fs = failingFS{FS: vfs.Default, d: d}
	return cfg
}

// failingFS fails every write and sync of pebble's log (its .log files) while its
// disk's failErr is set, as a disk that returns EIO or ENOSPC does.
type failingFS struct {
	vfs.FS
	d *fakeDisk
}

func (f failingFS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return file, err
	}
	return failingFile{File: file, d: f.d}, nil
}

func (f failingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return f.wrap(name, file, err)
}

func (f failingFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(old, name, c)
	return f.wrap(name, file, err)
}

type failingFile struct {
	vfs.File
	d *fakeDisk
}

func (f failingFile) fault() error {
	if e := f.d.failErr.Load(); e != nil {
		return *e
	}
	return nil
}

func (f failingFile) Write(p []byte) (int, error) {
	if err := f.fault(); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f failingFile) Sync() error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f failingFile) SyncData() error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func openCfg(t *testing.T, dir string, cfg Config) *Store {
	t.Helper()
	s, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDiskFullFloor: below the floor a Commit writes nothing and says why; once
// there is room, the same Commit lands.
func TestDiskFullFloor(t *testing.T) {
	d := newFakeDisk(1 << 30)
	dir := t.TempDir()
	s := openCfg(t, dir, d.config())
	defer s.Close()
	commit(t, s, []Record{rec("a", 1)})

	d.free.Store(512 << 10)
	err := s.Commit([]Record{rec("b", 2)}, nil)
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Commit below the floor = %v, want ErrDiskFull", err)
	}
	for _, want := range []string{"512.0 KiB free", "floor of 1.0 MiB", "--data-dir-min-free-bytes", dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if err := s.RaiseClock(100); !errors.Is(err, ErrDiskFull) {
		t.Errorf("RaiseClock below the floor = %v, want ErrDiskFull", err)
	}
	if st := s.Stats(); !st.Full || st.DiskFull != 2 || st.FreeBytes != 512<<10 {
		t.Errorf("Stats = %+v, want Full, DiskFull 2, FreeBytes 512 KiB", st)
	}
	if got := load(t, s); !equal(got, []Record{rec("a", 1)}) {
		t.Errorf("after the refused commit: %v, want only a", got)
	}

	d.free.Store(1 << 30)
	commit(t, s, []Record{rec("b", 2)})
	if st := s.Stats(); st.Full {
		t.Errorf("Stats.Full after room came back")
	}
	s = reopen(t, s)
	if got := load(t, s); !equal(got, []Record{rec("a", 1), rec("b", 2)}) {
		t.Errorf("after reopen: %v, want a and b", got)
	}
}

// TestDiskFullAtOpen: a store opened on a full disk opens read-only, loads, refuses
// writes, and reopens read-write by itself once there is room. A new store on a full
// disk is an error that says so.
func TestDiskFullAtOpen(t *testing.T) {
	d := newFakeDisk(1 << 30)
	dir := t.TempDir()
	s := openCfg(t, dir, d.config())
	if err := s.SetNodeID("n1"); err != nil {
		t.Fatal(err)
	}
	commit(t, s, []Record{rec("a", 5)})
	s.Close()

	d.free.Store(0)
	s = openCfg(t, dir, d.config())
	defer func() { s.Close() }()
	if s.NodeID() != "n1" || s.Clock() != 5 {
		t.Errorf("read-only open: node %q clock %d, want n1 and 5", s.NodeID(), s.Clock())
	}
	if got := load(t, s); !equal(got, []Record{rec("a", 5)}) {
		t.Errorf("read-only load: %v", got)
	}
	if err := s.Commit([]Record{rec("b", 6)}, nil); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Commit on a full disk = %v, want ErrDiskFull", err)
	}
	d.free.Store(1 << 30)
	commit(t, s, []Record{rec("b", 6)})
	if s.readOnly.Load() {
		t.Error("still read-only after a commit with room")
	}
	s = reopen(t, s)
	if got := load(t, s); !equal(got, []Record{rec("a", 5), rec("b", 6)}) {
		t.Errorf("after reopen: %v", got)
	}

	d.free.Store(0)
	_, err := Open(filepath.Join(t.TempDir(), "new"), d.config())
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "is new") {
		t.Errorf("Open of a new store on a full disk = %v, want ErrDiskFull saying it is new", err)
	}
}

// TestLogWriteFails: a log write that fails (EIO, or ENOSPC past the floor) is
// fatal to pebble's commit pipeline; the store turns it into ErrFailed, with no
// panic, refuses writes while the fault lasts, reopens pebble by itself once it has
// passed, and keeps every acknowledged commit.
func TestLogWriteFails(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.ENOSPC} {
		t.Run(errno.Error(), func(t *testing.T) {
			d := newFakeDisk(1 << 30)
			dir := t.TempDir()
			s := openCfg(t, dir, d.config())
			defer func() { s.Close() }()
			commit(t, s, []Record{rec("a", 1)})
			var e error = errno
			d.failErr.Store(&e)
			err := s.Commit([]Record{rec("b", 2)}, nil)
			if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), errno.Error()) {
				t.Fatalf("Commit with a failing log = %v, want ErrFailed naming %v", err, errno)
			}
			if st := s.Stats(); !st.Failed || st.Fatal != 1 {
				t.Errorf("Stats = %+v, want Failed and Fatal 1", st)
			}
			// Still failing: the reopen's first log write fails too.
			if err := s.Commit([]Record{rec("c", 3)}, nil); err == nil {
				t.Errorf("a Commit while the log still fails = nil")
			}
			d.failErr.Store(nil)
			// Not reopened on a disk with less than reopenMinFree, whatever the floor.
			d.free.Store(reopenMinFree - 1)
			if err := s.Commit([]Record{rec("c", 3)}, nil); !errors.Is(err, ErrDiskFull) || !errors.Is(err, ErrFailed) {
				t.Errorf("a Commit on a failed store short of room = %v, want ErrDiskFull and ErrFailed", err)
			}
			d.free.Store(1 << 30)
			commit(t, s, []Record{rec("c", 3)})
			if st := s.Stats(); st.Failed {
				t.Errorf("Stats.Failed after the store reopened")
			}
			s = reopen(t, s)
			got := load(t, s)
			if len(got) < 2 || !equal(got[:1], []Record{rec("a", 1)}) || !equal(got[len(got)-1:], []Record{rec("c", 3)}) {
				t.Errorf("after restart: %v, want a and c (b may be there: its write failed)", got)
			}
		})
	}
}

// TestDamagedTable: an sstable damaged in any of these ways fails Open or Load with
// an error that names the file and the way out, not a panic.
func TestDamagedTable(t *testing.T) {
	damage := map[string]func(path string, b []byte) error{
		"bits flipped": func(path string, b []byte) error {
			for i := 100; i < 300 && i < len(b); i++ {
				b[i] ^= 0xff
			}
			return os.WriteFile(path, b, 0o600)
		},
		"footer flipped": func(path string, b []byte) error {
			for i := len(b) - 40; i < len(b); i++ {
				b[i] ^= 0xff
			}
			return os.WriteFile(path, b, 0o600)
		},
		"truncated": func(path string, b []byte) error { return os.WriteFile(path, b[:len(b)/2], 0o600) },
		"empty":     func(path string, _ []byte) error { return os.WriteFile(path, nil, 0o600) },
		"removed":   func(path string, _ []byte) error { return os.Remove(path) },
	}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			var puts []Record
			for i := range 200 {
				puts = append(puts, rec(fmt.Sprintf("%040d", i), uint64(i+1)))
			}
			commit(t, s, puts)
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
			s.Close()
			ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
			if len(ssts) == 0 {
				t.Fatal("no sstable after a flush")
			}
			b, err := os.ReadFile(ssts[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := fn(ssts[0], b); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(dir, DefaultConfig())
			if err == nil {
				err = s2.Load(func(Record) error { return nil })
				s2.Close()
			}
			if err == nil {
				t.Fatal("a damaged sstable opened and loaded")
			}
			num := strings.TrimSuffix(filepath.Base(ssts[0]), ".sst")
			for _, want := range []string{num, "move the data dir aside", "re-syncs"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// BenchmarkFreeSpace: the cost of the floor's check, paid by every write.
func BenchmarkFreeSpace(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if _, err := freeSpace(dir); err != nil {
			b.Fatal(err)
		}
	}
}
