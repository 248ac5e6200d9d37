package sidecar

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// fakeReadiness is a readinessNode the test drives.
type fakeReadiness struct {
	ready, done chan struct{}
	mu          sync.Mutex
	ok          bool   // guarded by mu
	reason      string // guarded by mu
}

func (f *fakeReadiness) Ready() <-chan struct{} { return f.ready }
func (f *fakeReadiness) Done() <-chan struct{}  { return f.done }
func (f *fakeReadiness) Draining() bool         { return false }

// ReadinessChanged never fires: the test relies on the poll's ticks, as a
// certificate's expiry does.
func (f *fakeReadiness) ReadinessChanged() <-chan struct{} { return nil }
func (f *fakeReadiness) Readiness() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ok, f.reason
}
func (f *fakeReadiness) set(ok bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ok, f.reason = ok, reason
}

// TestPublishReadiness: the health service stays NOT_SERVING until the bootstrap
// ends, then follows the node's readiness both ways (a certificate that expires, one
// renewed) at the poll's next tick, and publishReadiness returns when the node
// closes.
func TestPublishReadiness(t *testing.T) {
	f := &fakeReadiness{ready: make(chan struct{}), done: make(chan struct{}), ok: true, reason: "ready: synced"}
	h := health.NewServer()
	h.SetServingStatus(ReadinessService, healthpb.HealthCheckResponse_NOT_SERVING)
	ret := make(chan struct{})
	poll := make(chan time.Time) // unbuffered: a send returns once the publisher took the tick
	go func() {
		defer close(ret)
		publishReadiness(f, h, poll, slog.New(slog.DiscardHandler))
	}()
	// Watch sends every change of the service's status, in order.
	updates := make(chan healthpb.HealthCheckResponse_ServingStatus, 16)
	ctx, cancel := context.WithCancel(context.Background())
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		_ = h.Watch(&healthpb.HealthCheckRequest{Service: ReadinessService}, &watchStream{ctx: ctx, out: updates})
	}()
	defer func() { cancel(); <-watching }()
	next := func(want healthpb.HealthCheckResponse_ServingStatus, when string) {
		t.Helper()
		select {
		case got := <-updates:
			if got != want {
				t.Fatalf("%s: %s, want %s", when, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change to %s within 10s", when, want)
		}
	}
	tick := func() {
		t.Helper()
		select {
		case poll <- time.Now():
		case <-time.After(10 * time.Second):
			t.Fatal("publishReadiness took no tick of its poll within 10s")
		}
	}
	next(healthpb.HealthCheckResponse_NOT_SERVING, "before the bootstrap ends")
	close(f.ready)
	next(healthpb.HealthCheckResponse_SERVING, "the bootstrap ended")
	f.set(false, "not ready: certificate expired")
	tick()
	next(healthpb.HealthCheckResponse_NOT_SERVING, "the certificate expired")
	f.set(true, "ready: synced")
	tick()
	next(healthpb.HealthCheckResponse_SERVING, "a renewed certificate")
	close(f.done)
	select {
	case <-ret:
	case <-time.After(10 * time.Second):
		t.Fatal("publishReadiness did not return within 10s of the node's close")
	}
}

// watchStream is the server side of a Health.Watch stream that hands each status to
// out.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
	out chan<- healthpb.HealthCheckResponse_ServingStatus
}

func (w *watchStream) Context() context.Context { return w.ctx }
func (w *watchStream) Send(r *healthpb.HealthCheckResponse) error {
	w.out <- r.GetStatus()
	return nil
}
