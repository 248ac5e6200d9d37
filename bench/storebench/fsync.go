package main

import (
	"os"
	"path/filepath"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// fsyncResult is what one durable write costs on this disk.
type fsyncResult struct {
	Store string        `json:"store"`
	Ops   int           `json:"ops"`
	Cases []fsyncFigure `json:"cases"`
}

type fsyncFigure struct {
	Name  string  `json:"name"`
	P50us int64   `json:"p50_us"`
	P99us int64   `json:"p99_us"`
	MaxUs int64   `json:"max_us"`
	PerS  float64 `json:"per_sec"`
}

// probeFsync times 1,000 4 KiB writes each followed by a sync, three ways:
// overwrite + fdatasync (a preallocated log, pebble's recycled WAL), append +
// fdatasync (the file grows, so its size goes to the journal too), overwrite + fsync.
func probeFsync(dir string) (*fsyncResult, error) {
	const ops = 1000
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	res := &fsyncResult{Store: "fsync", Ops: ops}
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	cases := []struct {
		name   string
		append bool
		sync   func(int) error
	}{
		{"overwrite 4 KiB + fdatasync", false, unix.Fdatasync},
		{"append 4 KiB + fdatasync", true, unix.Fdatasync},
		{"overwrite 4 KiB + fsync", false, unix.Fsync},
	}
	for _, c := range cases {
		path := filepath.Join(dir, "probe")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, err
		}
		if !c.append { // allocate and sync the region first
			if _, err := f.WriteAt(make([]byte, ops*4096), 0); err != nil {
				return nil, err
			}
			if err := f.Sync(); err != nil {
				return nil, err
			}
		}
		h := hdrhistogram.New(1, 10_000_000, 3)
		t0 := time.Now()
		for i := range ops {
			s := time.Now()
			if _, err := f.WriteAt(buf, int64(i)*4096); err != nil {
				return nil, err
			}
			if err := c.sync(int(f.Fd())); err != nil {
				return nil, err
			}
			h.RecordValue(time.Since(s).Microseconds())
		}
		el := time.Since(t0)
		f.Close()
		os.Remove(path)
		res.Cases = append(res.Cases, fsyncFigure{Name: c.name, P50us: h.ValueAtQuantile(50),
			P99us: h.ValueAtQuantile(99), MaxUs: h.Max(), PerS: ops / el.Seconds()})
	}
	return res, nil
}
