package loadkit

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestNilWindowIsNoFlowControl(t *testing.T) {
	w := NewWindow(0, 2, 0)
	if w != nil {
		t.Fatal("a window of 0 events is nil")
	}
	if err := w.Acquire(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	w.Received(0, 1)
	w.Forget(1)
	if w.Max() != 0 {
		t.Fatal("Max of nil")
	}
}

// acquired reports whether Acquire(n) returns within d.
func acquired(w *Window, n int, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return w.Acquire(ctx, n) == nil
}

func TestWindowWaitsForTheSlowestSubscriber(t *testing.T) {
	w := NewWindow(100, 2, time.Hour)
	if !acquired(w, 60, time.Second) || !acquired(w, 40, time.Second) {
		t.Fatal("100 events fit in a window of 100")
	}
	if acquired(w, 10, 20*time.Millisecond) {
		t.Fatal("a full window let 10 more through")
	}
	w.Received(0, 50) // one subscriber is not enough
	if acquired(w, 10, 20*time.Millisecond) {
		t.Fatal("the window moved with one subscriber of two")
	}
	done := make(chan bool)
	go func() { done <- acquired(w, 10, 5*time.Second) }()
	time.Sleep(10 * time.Millisecond)
	w.Received(1, 10) // room for 10 more, but a waiting publisher waits for half the window
	select {
	case <-done:
		t.Fatal("Acquire woke before the window was half empty")
	case <-time.After(20 * time.Millisecond):
	}
	w.Received(1, 50)
	w.Received(0, 10) // both have 60 of 100: 10 more fit in half the window
	if !<-done {
		t.Fatal("Acquire did not wake when the slowest subscriber caught up")
	}
}

func TestWindowForget(t *testing.T) {
	w := NewWindow(10, 1, time.Hour)
	if !acquired(w, 10, time.Second) {
		t.Fatal("fill")
	}
	done := make(chan bool)
	go func() { done <- acquired(w, 5, 5*time.Second) }()
	time.Sleep(10 * time.Millisecond)
	w.Forget(5) // refused: they will never arrive
	if !<-done {
		t.Fatal("Acquire did not wake on Forget")
	}
}

func TestWindowLargerSendGoesAlone(t *testing.T) {
	w := NewWindow(10, 1, time.Hour)
	if !acquired(w, 50, time.Second) {
		t.Fatal("a send larger than an empty window must go")
	}
	if acquired(w, 1, 20*time.Millisecond) {
		t.Fatal("nothing more until it has arrived")
	}
}

func TestWindowStall(t *testing.T) {
	w := NewWindow(10, 1, 30*time.Millisecond)
	if !acquired(w, 10, time.Second) {
		t.Fatal("fill")
	}
	if !acquired(w, 4, time.Second) {
		t.Fatal("a stalled window must write off and go on")
	}
	if s, off := w.Stalls(); s != 1 || off != 10 {
		t.Fatalf("Stalls = %d, %d; want 1, 10", s, off)
	}
}

// Many publishers and subscribers at once: nothing is outstanding beyond the window.
func TestWindowConcurrent(t *testing.T) {
	const max, subs, pubs, each = 64, 3, 2, 5000
	w := NewWindow(max, subs, time.Hour)
	queues := make([]chan int, subs)
	for i := range queues {
		queues[i] = make(chan int, pubs*each)
	}
	var wg sync.WaitGroup
	for range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := w.Acquire(context.Background(), 1); err != nil {
					t.Error(err)
					return
				}
				if out := w.sent.Load() - w.low(); out > max {
					t.Errorf("%d outstanding, window %d", out, max)
				}
				for _, q := range queues {
					q <- 1
				}
			}
		}()
	}
	for i, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range pubs * each {
				w.Received(i, <-q)
			}
		}()
	}
	wg.Wait()
}
