package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Handlers are called by a Cache's Run, in its goroutine, one at a time, in the order
// of the changes, after the local map has taken the change. Any may be nil. They
// should return quickly: the cache reads nothing while one runs (the sidecar keeps
// each key's latest for it meanwhile, so a slow handler costs no memory).
type Handlers struct {
	// OnAdd: a key appeared (during the first list too, before HasSynced).
	OnAdd func(e Entry)
	// OnUpdate: a key has a newer value.
	OnUpdate func(old, e Entry)
	// OnDelete: a key was deleted; last is its last state in the cache.
	OnDelete func(last Entry)
}

// Cache is an informer: a local copy of the keys under a prefix kept current by a
// Watch (list, then watch, resumed by itself), with handlers for each change. Reads
// (Get, List, Len) are safe from any goroutine and never call the sidecar.
type Cache struct {
	c        *Client
	prefix   string
	opts     []WatchOption
	mu       sync.RWMutex
	items    map[string]Entry
	handlers []Handlers
	running  atomic.Bool
	synced   atomic.Bool
	syncedCh chan struct{}
}

// NewCache makes a cache of the keys under prefix. Add handlers, then Run it.
func NewCache(c *Client, prefix string, opts ...WatchOption) *Cache {
	return &Cache{c: c, prefix: prefix, opts: opts, items: make(map[string]Entry), syncedCh: make(chan struct{})}
}

// AddHandlers adds h. It must be called before Run.
func (k *Cache) AddHandlers(h Handlers) error {
	if k.running.Load() {
		return errors.New("client: Cache.AddHandlers after Run: add handlers before Run starts the cache")
	}
	k.mu.Lock()
	k.handlers = append(k.handlers, h)
	k.mu.Unlock()
	return nil
}

// Run fills the cache and keeps it current until ctx ends (it returns ctx's error) or
// its Watch fails for good (see Client.Watch). Run it once, in a goroutine of its own.
func (k *Cache) Run(ctx context.Context) error {
	if !k.running.CompareAndSwap(false, true) {
		return errors.New("client: Cache.Run called twice: a cache runs once")
	}
	w := k.c.Watch(ctx, k.prefix, k.opts...)
	defer w.Close()
	k.mu.RLock()
	hs := append([]Handlers(nil), k.handlers...)
	k.mu.RUnlock()
	for {
		ev, err := w.Next()
		if err != nil {
			return err
		}
		k.apply(ev, hs)
	}
}

func (k *Cache) apply(ev WatchEvent, hs []Handlers) {
	if ev.Type == EventSynced {
		k.synced.Store(true)
		close(k.syncedCh)
		return
	}
	key := ev.Entry.Key
	k.mu.Lock()
	old, had := k.items[key]
	if ev.Type == EventDelete {
		delete(k.items, key)
	} else {
		k.items[key] = ev.Entry
	}
	k.mu.Unlock()
	for _, h := range hs {
		switch {
		case ev.Type == EventDelete && had && h.OnDelete != nil:
			h.OnDelete(old)
		case ev.Type == EventPut && had && h.OnUpdate != nil:
			h.OnUpdate(old, ev.Entry)
		case ev.Type == EventPut && !had && h.OnAdd != nil:
			h.OnAdd(ev.Entry)
		}
	}
}

// HasSynced reports whether the first list is complete: the cache holds every key
// the sidecar held then.
func (k *Cache) HasSynced() bool { return k.synced.Load() }

// WaitForSync waits until HasSynced or ctx ends (ctx's error).
func (k *Cache) WaitForSync(ctx context.Context) error {
	select {
	case <-k.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Get returns key's entry in the cache. Its Value and Attributes are shared: do not
// modify them.
func (k *Cache) Get(key string) (Entry, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	e, ok := k.items[key]
	return e, ok
}

// List returns a copy of the cache's map (entries shared as Get's).
func (k *Cache) List() map[string]Entry {
	k.mu.RLock()
	defer k.mu.RUnlock()
	m := make(map[string]Entry, len(k.items))
	for key, e := range k.items {
		m[key] = e
	}
	return m
}

// Len is the number of keys in the cache.
func (k *Cache) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.items)
}
