package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fanout/fanout/pkg/client"
)

// TestCache: the keys present before Run arrive as OnAdd before HasSynced; later
// writes are OnUpdate and OnDelete with the old state; the local map equals the
// sidecar's; a write to another node of the cluster reaches the cache too.
func TestCache(t *testing.T) {
	nodes := startNodes(t, 2)
	c := dial(t, nodes[0].app)
	other := dial(t, nodes[1].app)
	ctx := within(t, time.Minute)
	const prefix = "cache/"
	for i := range 3 {
		if _, err := c.Put(ctx, fmt.Sprintf("%sk%d", prefix, i), []byte("v0")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Put(ctx, "elsewhere/k", []byte("x")); err != nil {
		t.Fatal(err)
	}

	cache := client.NewCache(c, prefix)
	var mu sync.Mutex
	var log []string
	changed := make(chan struct{}, 100)
	note := func(s string) {
		mu.Lock()
		log = append(log, s)
		mu.Unlock()
		changed <- struct{}{}
	}
	err := cache.AddHandlers(client.Handlers{
		OnAdd: func(e client.Entry) { note(fmt.Sprintf("add %s=%s synced=%v", e.Key, e.Value, cache.HasSynced())) },
		OnUpdate: func(old, e client.Entry) {
			note(fmt.Sprintf("update %s %s->%s", e.Key, old.Value, e.Value))
		},
		OnDelete: func(last client.Entry) { note(fmt.Sprintf("delete %s (was %s)", last.Key, last.Value)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- cache.Run(rctx) }()
	defer func() {
		stop()
		if err := <-ran; err != context.Canceled {
			t.Errorf("Run after its ctx was cancelled: %v, want context.Canceled", err)
		}
	}()
	if err := cache.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if !cache.HasSynced() || cache.Len() != 3 {
		t.Fatalf("synced %v with %d keys, want 3", cache.HasSynced(), cache.Len())
	}
	if err := cache.AddHandlers(client.Handlers{}); err == nil {
		t.Error("AddHandlers after Run: no error")
	}

	if _, err := c.Put(ctx, prefix+"k1", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Delete(ctx, prefix+"k2"); err != nil { // from the other node
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, prefix+"k3", []byte("v0")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"add cache/k0=v0 synced=false", "add cache/k1=v0 synced=false", "add cache/k2=v0 synced=false",
		"update cache/k1 v0->v1", "delete cache/k2 (was v0)", "add cache/k3=v0 synced=true",
	}
	deadline := time.After(30 * time.Second)
	for {
		mu.Lock()
		n := len(log)
		mu.Unlock()
		if n >= len(want) {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("handlers called %d times, want %d: %q", n, len(want), log)
		}
	}
	mu.Lock()
	if fmt.Sprint(log) != fmt.Sprint(want) {
		t.Errorf("handlers:\n got %q\nwant %q", log, want)
	}
	mu.Unlock()
	if e, ok := cache.Get(prefix + "k3"); !ok || e.Origin != "B" || string(e.Value) != "v0" {
		t.Errorf("Get k3: %+v %v, want v0 from B", e, ok)
	}
	sidecar, err := c.ListAll(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if d := mapDiff(cache.List(), sidecar); d != "" {
		t.Errorf("the cache differs from the sidecar: %s", d)
	}
}
