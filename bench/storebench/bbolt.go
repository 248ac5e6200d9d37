package main

import (
	"encoding/binary"
	"path/filepath"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// bucket holds the records; meta holds the clock's high-water mark under "clock",
// raised in the same transaction as the records (pkg/store's Commit).
var bucket, meta, clockKey = []byte("k"), []byte("m"), []byte("clock")

// boltKV writes through one of two group commits: its own loop (batch false), one
// goroutine that takes every commit waiting and applies them in one Update (one
// transaction, two fdatasyncs: the pages, then the meta page), or bbolt's db.Batch
// (batch true), which waits up to MaxBatchDelay (10 ms) for up to MaxBatchSize (1,000)
// calls to join.
type boltKV struct {
	db    *bolt.DB
	batch bool
	reqs  chan boltReq
	stop  chan struct{}
	wg    sync.WaitGroup
	txid0 int
}

type boltReq struct {
	recs []rec
	done chan error
}

func openBolt(dir string, batch bool) (*boltKV, error) {
	// etcd's choices: the hashmap freelist, not written at each commit (rebuilt by
	// scanning at open).
	db, err := bolt.Open(filepath.Join(dir, "store.db"), 0o600, &bolt.Options{
		FreelistType: bolt.FreelistMapType, NoFreelistSync: true,
	})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucket); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(meta)
		return err
	}); err != nil {
		return nil, err
	}
	b := &boltKV{db: db, batch: batch, reqs: make(chan boltReq, 1024), stop: make(chan struct{})}
	b.txid0 = b.txid()
	if !batch {
		b.wg.Go(b.loop)
	}
	return b, nil
}

func apply(tx *bolt.Tx, recs []rec) error {
	bk := tx.Bucket(bucket)
	for _, r := range recs {
		var err error
		if r.val == nil {
			err = bk.Delete(r.key)
		} else {
			err = bk.Put(r.key, r.val)
		}
		if err != nil {
			return err
		}
	}
	return raiseClock(tx, topVersion(recs))
}

func raiseClock(tx *bolt.Tx, top uint64) error {
	m := tx.Bucket(meta)
	if v := m.Get(clockKey); top == 0 || (len(v) == 8 && binary.BigEndian.Uint64(v) >= top) {
		return nil
	}
	return m.Put(clockKey, binary.BigEndian.AppendUint64(nil, top))
}

func (b *boltKV) commit(recs []rec) error {
	if b.batch {
		return b.db.Batch(func(tx *bolt.Tx) error { return apply(tx, recs) })
	}
	done := make(chan error, 1)
	b.reqs <- boltReq{recs: recs, done: done}
	return <-done
}

// loop is the group commit: it takes one waiting commit, then every other one already
// waiting, and applies them all in one transaction.
func (b *boltKV) loop() {
	for {
		var group []boltReq
		select {
		case r := <-b.reqs:
			group = append(group, r)
		case <-b.stop:
			return
		}
	drain:
		for len(group) < 1024 {
			select {
			case r := <-b.reqs:
				group = append(group, r)
			default:
				break drain
			}
		}
		err := b.db.Update(func(tx *bolt.Tx) error {
			for _, r := range group {
				if err := apply(tx, r.recs); err != nil {
					return err
				}
			}
			return nil
		})
		for _, r := range group {
			r.done <- err
		}
	}
}

func (b *boltKV) scan(fn func(k, v []byte)) error {
	return b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			fn(k, v)
		}
		return nil
	})
}

func (b *boltKV) txid() int {
	var id int
	_ = b.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
	return id
}

// syncs counts the write transactions: each is one durable commit (two fdatasyncs).
func (b *boltKV) syncs() int64 { return int64(b.txid() - b.txid0) }

func (b *boltKV) close() error {
	close(b.stop)
	b.wg.Wait()
	return b.db.Close()
}
