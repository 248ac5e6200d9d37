package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// pebbleKV commits each call as one batch with pebble.Sync, as pkg/store does: the
// records under the prefix 'k' and the clock's high-water mark as a max-merge operand
// under "mclock". pebble's commit pipeline makes concurrent synced commits share one
// fdatasync of the WAL.
type pebbleKV struct {
	db       *pebble.DB
	walSyncs *atomic.Int64
}

func openPebble(dir string) (*pebbleKV, error) {
	n := new(atomic.Int64)
	db, err := pebble.Open(dir, &pebble.Options{
		FS:     countingFS{FS: vfs.Default, walSyncs: n},
		Merger: &pebble.Merger{Name: "storebench.clock.max", Merge: newMaxMerger},
	})
	if err != nil {
		return nil, err
	}
	return &pebbleKV{db: db, walSyncs: n}, nil
}

func (p *pebbleKV) commit(recs []rec) error {
	b := p.db.NewBatch()
	defer b.Close()
	for _, r := range recs {
		var err error
		if r.val == nil {
			err = b.Delete(r.key, nil)
		} else {
			err = b.Set(r.key, r.val, nil)
		}
		if err != nil {
			return err
		}
	}
	if top := topVersion(recs); top > 0 {
		if err := b.Merge(pebbleClockKey, binary.BigEndian.AppendUint64(nil, top), nil); err != nil {
			return err
		}
	}
	return b.Commit(pebble.Sync)
}

var pebbleClockKey = []byte("mclock")

// maxMerger folds 8-byte big-endian clock operands into their maximum (pkg/store's
// clock.go).
type maxMerger struct{ max uint64 }

func newMaxMerger(_, v []byte) (pebble.ValueMerger, error) {
	m := &maxMerger{}
	return m, m.MergeNewer(v)
}

func (m *maxMerger) MergeNewer(v []byte) error {
	if len(v) != 8 {
		return fmt.Errorf("clock operand of %d bytes", len(v))
	}
	m.max = max(m.max, binary.BigEndian.Uint64(v))
	return nil
}

func (m *maxMerger) MergeOlder(v []byte) error { return m.MergeNewer(v) }

func (m *maxMerger) Finish(bool) ([]byte, io.Closer, error) {
	return binary.BigEndian.AppendUint64(nil, m.max), nil, nil
}

func (p *pebbleKV) scan(fn func(k, v []byte)) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'k'}, UpperBound: []byte{'k' + 1}})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		fn(it.Key(), it.Value())
	}
	return it.Close()
}

func (p *pebbleKV) syncs() int64 { return p.walSyncs.Load() }
func (p *pebbleKV) close() error { return p.db.Close() }

// countingFS counts the data syncs of the WAL files (*.log): the durable syncs that
// commits wait for.
type countingFS struct {
	vfs.FS
	walSyncs *atomic.Int64
}

func (c countingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return countingFile{File: f, n: c.walSyncs}, nil
}

func (c countingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, cat)
	return c.wrap(name, f, err)
}

func (c countingFS) ReuseForWrite(old, name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.ReuseForWrite(old, name, cat)
	return c.wrap(name, f, err)
}

func (c countingFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.OpenReadWrite(name, cat, opts...)
	return c.wrap(name, f, err)
}

type countingFile struct {
	vfs.File
	n *atomic.Int64
}

func (f countingFile) Sync() error     { f.n.Add(1); return f.File.Sync() }
func (f countingFile) SyncData() error { f.n.Add(1); return f.File.SyncData() }
