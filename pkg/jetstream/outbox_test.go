package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
)

func task(id string, n int) *batcher.Task[wire.Outgoing] {
	return &batcher.Task[wire.Outgoing]{ID: id, Value: wire.Outgoing{Raw: make([]byte, n)}}
}

// TestOutbox: bounded in bytes, queued and in-flight alike; FIFO; waitEmpty waits
// for the flights; closed, it refuses with FateStopped.
func TestOutbox(t *testing.T) {
	var o outbox
	o.init(100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, step := range []struct {
		t    *batcher.Task[wire.Outgoing]
		ok   bool
		fate batcher.Fate
	}{{task("a", 60), true, 0}, {task("b", 40), true, 0}, {task("c", 1), false, batcher.FateOverflow}} {
		if f, ok := o.push(step.t); ok != step.ok || (!ok && f != step.fate) {
			t.Fatalf("push %s: %v, %t", step.t.ID, f, ok)
		}
	}
	a, _ := o.pop(ctx)
	if a.ID != "a" {
		t.Fatalf("pop: %s, want a (FIFO)", a.ID)
	}
	if _, ok := o.push(task("d", 1)); ok {
		t.Fatal("a task in flight still counts against the bound")
	}
	o.done(a)
	if _, ok := o.push(task("d", 60)); !ok {
		t.Fatal("a done task's bytes are not freed")
	}
	short, stop := context.WithCancel(ctx)
	stop()
	if err := o.waitEmpty(short); err == nil {
		t.Fatal("waitEmpty with two queued: nil")
	}
	for range 2 {
		x, _ := o.pop(ctx)
		o.done(x)
	}
	if err := o.waitEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := o.pop(short); ok {
		t.Fatal("pop of an empty outbox with an ended context")
	}
	o.push(task("e", 1))
	if left := o.drop(); len(left) != 1 || left[0].ID != "e" {
		t.Fatalf("drop: %v", left)
	}
	if f, ok := o.push(task("f", 1)); ok || f != batcher.FateStopped {
		t.Fatalf("push after drop: %v, %t", f, ok)
	}
}
